package apiserver

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/agentbox/agentbox/vmctl/api"
)

// handler is one route's function: it answers w, or returns the error
// routeHandler answers (or, once the answer began, cuts the stream with).
type handler func(s *Server, w http.ResponseWriter, r *http.Request, q url.Values) error

// request is a request whose path values are checked: the typed helpers
// below hand it to the route's function.
type request struct {
	*http.Request
	// q is the checked query (checkQuery).
	q url.Values
	// id is the sandbox reference ({id}), pid the process id ({pid}),
	// name the snapshot reference ({name}), key the warm template key
	// ({key}), port the forward's guest port ({port}), node a cluster
	// node's name ({node}); "" when the route has no such wildcard.
	id, pid, name, key, port, node string
}

// newRequest checks r's path values ({id}, {pid}, {name}, {key}, {port},
// {node}, in that order): 400 invalid_argument for a malformed one.
func newRequest(r *http.Request, q url.Values) (*request, error) {
	req := &request{Request: r, q: q}
	for _, pv := range []struct {
		name  string
		dst   *string
		check func(string) error
	}{
		{"id", &req.id, api.CheckRef},
		{"pid", &req.pid, api.CheckProcessID},
		{"name", &req.name, api.CheckSnapshotRef},
		{"key", &req.key, api.CheckWarmKey},
		{"port", &req.port, api.CheckPort},
		{"node", &req.node, api.CheckNodeName},
	} {
		if !strings.Contains(r.Pattern, "{"+pv.name+"}") {
			continue
		}
		*pv.dst = r.PathValue(pv.name)
		if err := pv.check(*pv.dst); err != nil {
			return nil, err
		}
	}
	return req, nil
}

// path returns the checked, cleaned "path" query parameter.
func (r *request) path() (string, error) {
	return api.CleanGuestPath("query parameter path", r.q.Get("path"))
}

// stream is a route that writes its own answer (streams, raw bodies, 204s).
func stream(call func(s *Server, w http.ResponseWriter, r *request) error) handler {
	return func(s *Server, w http.ResponseWriter, hr *http.Request, q url.Values) error {
		r, err := newRequest(hr, q)
		if err != nil {
			return err
		}
		return call(s, w, r)
	}
}

// reply is a route answered with status and the JSON of call's value.
func reply[T any](status int, call func(s *Server, r *request) (T, error)) handler {
	return stream(func(s *Server, w http.ResponseWriter, r *request) error {
		v, err := call(s, r)
		if err != nil {
			return err
		}
		return writeJSON(w, status, v)
	})
}

// created is a route answered 201 with call's value and a Location header
// (location of the value).
func created[T any](location func(r *request, v T) string, call func(s *Server, r *request) (T, error)) handler {
	return stream(func(s *Server, w http.ResponseWriter, r *request) error {
		v, err := call(s, r)
		if err != nil {
			return err
		}
		if location != nil {
			w.Header().Set("Location", location(r, v))
		}
		return writeJSON(w, http.StatusCreated, v)
	})
}

// status is a route answered with an empty body and code (204, 201).
func status(code int, call func(s *Server, r *request) error) handler {
	return stream(func(s *Server, w http.ResponseWriter, r *request) error {
		if err := call(s, r); err != nil {
			return err
		}
		w.WriteHeader(code)
		return nil
	})
}

// withBody decodes r's JSON body into a Req (decodeJSON), checks it with
// validate (nil: none) and passes it on to call.
func withBody[Req, T any](validate func(*Req) error, call func(s *Server, r *request, req Req) (T, error)) func(*Server, *request) (T, error) {
	return func(s *Server, r *request) (T, error) {
		var req Req
		var zero T
		if err := decodeJSON(r.Request, &req); err != nil {
			return zero, err
		}
		if validate != nil {
			if err := validate(&req); err != nil {
				return zero, err
			}
		}
		return call(s, r, req)
	}
}

// noValue drops the value of a call whose route answers without a body.
func noValue[T any](call func(*Server, *request) (T, error)) func(*Server, *request) error {
	return func(s *Server, r *request) error {
		_, err := call(s, r)
		return err
	}
}

// needs wraps the routes of an optional Backend interface B (snapshots,
// warm templates): a Backend without it answers 501 not_implemented
// before anything else is checked; what names the feature.
func needs[B any](what string, h handler) handler {
	return func(s *Server, w http.ResponseWriter, r *http.Request, q url.Values) error {
		if _, ok := s.backend.(B); !ok {
			return api.Errorf(http.StatusNotImplemented, api.CodeNotImplemented, "this daemon does not support %s", what)
		}
		return h(s, w, r, q)
	}
}

// nonNil returns list, or an empty list for nil (the schema's arrays are
// never null).
func nonNil[T any](list []T) []T {
	if list == nil {
		return []T{}
	}
	return list
}

// writeJSON answers v as JSON with status.
func writeJSON(w http.ResponseWriter, status int, v any) error {
	body, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encoding the answer: %w", err)
	}
	h := w.Header()
	h.Set("Content-Type", api.ContentTypeJSON)
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, err = w.Write(append(body, '\n'))
	return err
}

// untilDrain returns ctx, also cancelled when Shutdown starts.
func (s *Server) untilDrain(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(s.drain, cancel)
	return ctx, func() { stop(); cancel() }
}
