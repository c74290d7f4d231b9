package cluster

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// leaderGet reads key of KV bucket from the stream's leader: JetStream's
// STREAM.MSG.GET API ({"last_by_subj": "$KV.BUCKET.KEY"}), which only the
// leader answers, instead of the direct get the KV handle uses (a bucket
// is created with allow_direct, and a direct get may be answered by any
// replica, a follower that has not yet applied the last write included:
// not read-your-writes; see the JetStream "Direct Get" notes, ADR-31).
// It is what a read that found nothing asks before it answers "not
// found": an entry written just before (a create placed on another node,
// then a request for it here) is then found. ok is false when the key is
// missing or its last operation is a delete or purge. Errors: NATS's
// (the caller maps them to unavailable).
func (n *Node) leaderGet(ctx context.Context, bucket, key string) (value []byte, ok bool, err error) {
	req, _ := json.Marshal(map[string]string{"last_by_subj": "$KV." + bucket + "." + key})
	m, err := n.nc.RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET.KV_"+bucket, req)
	if err != nil {
		return nil, false, err
	}
	var resp struct {
		Message *struct {
			Header []byte `json:"hdrs"`
			Data   []byte `json:"data"`
		} `json:"message"`
		Error *struct {
			Code        int    `json:"code"`
			ErrCode     int    `json:"err_code"`
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(m.Data, &resp); err != nil {
		return nil, false, fmt.Errorf("JetStream message get of %s in %s: %w", key, bucket, err)
	}
	if resp.Error != nil {
		if resp.Error.ErrCode == int(jetstream.JSErrCodeMessageNotFound) {
			return nil, false, nil
		}
		return nil, false, fmt.Errorf("JetStream message get of %s in %s: %s (%d)", key, bucket, resp.Error.Description, resp.Error.ErrCode)
	}
	if resp.Message == nil {
		return nil, false, fmt.Errorf("JetStream message get of %s in %s: an answer without a message", key, bucket)
	}
	if len(resp.Message.Header) > 0 {
		h, err := nats.DecodeHeadersMsg(resp.Message.Header)
		if err != nil {
			return nil, false, fmt.Errorf("JetStream message get of %s in %s: %w", key, bucket, err)
		}
		if op := h.Get("KV-Operation"); op == "DEL" || op == "PURGE" {
			return nil, false, nil
		}
	}
	return resp.Message.Data, true, nil
}
