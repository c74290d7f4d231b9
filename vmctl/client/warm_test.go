package client_test

import (
	"context"
	"errors"
	"net/http"
	"reflect"
	"testing"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/backend/backendtest"
)

func TestWarmRoundTrips(t *testing.T) {
	ctx := context.Background()
	b := &backendtest.Fake{}
	var deleted []string
	b.Warm.DeleteFn = func(ctx context.Context, key string) error {
		deleted = append(deleted, key)
		if key == "ffffffffffffffffffffffff" {
			return api.Errorf(http.StatusNotFound, api.CodeNotFound, "no warm template %s", key)
		}
		return nil
	}
	c := start(t, b)
	if l, err := c.ListWarm(ctx); err != nil || len(l) != 1 || !reflect.DeepEqual(l[0], backendtest.WarmTemplate()) {
		t.Errorf("ListWarm = %+v, %v", l, err)
	}
	if err := c.DeleteWarm(ctx, backendtest.WarmKey); err != nil {
		t.Error(err)
	}
	var ae *api.Error
	if err := c.DeleteWarm(ctx, "ffffffffffffffffffffffff"); !errors.As(err, &ae) || ae.Status != 404 {
		t.Errorf("DeleteWarm of a missing one = %v", err)
	}
	if err := c.DeleteWarm(ctx, "x"); !errors.As(err, &ae) || ae.Status != 400 || ae.Code != api.CodeInvalidArgument {
		t.Errorf("DeleteWarm of a bad key = %v", err)
	}
	if !reflect.DeepEqual(deleted, []string{backendtest.WarmKey, "ffffffffffffffffffffffff"}) {
		t.Errorf("backend deletes %v", deleted)
	}
}
