package client

import (
	"net/url"

	"github.com/agentbox/agentbox/vmctl/api"
)

// Resuming returns a client like c whose calls that can resume a paused
// sandbox ask for it (?resume=true, E2B's connect): a sandbox paused in
// memory or to disk is resumed first, and the call then runs, instead of
// failing with 409 sandbox_not_running. A running sandbox is left as it
// is. Those calls are Exec, StartInteractive and ExecInteractive,
// StartProcess, WriteStdin, KillProcess, Upload, Download, Stat, List,
// Mkdir, RemoveFile and ForwardPort; the others are unchanged. The two clients share their connections. A resume that
// fails is the call's error: 429 capacity_exceeded (the sandbox stays
// paused), 412 snapshot_unusable (it is failed then).
func (c *Client) Resuming() *Client {
	t := *c.transport
	t.resume = true
	return newClient(&t)
}

// resumable is endpoint for a route that takes ?resume=true: with it when
// c is Resuming.
func (c *transport) resumable(q url.Values, segs ...string) *url.URL {
	if c.resume {
		if q == nil {
			q = url.Values{}
		}
		q.Set(api.ResumeQuery, "true")
	}
	return c.endpoint(q, segs...)
}
