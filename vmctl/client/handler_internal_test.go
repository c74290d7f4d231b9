package client

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// closeRecorder is a request body that says whether it was closed.
type closeRecorder struct {
	io.Reader
	closed chan struct{}
}

func (c *closeRecorder) Close() error { close(c.closed); return nil }

// TestHandlerTransportClosesBody: as http.RoundTripper requires, the
// in-process transport closes the request's body, also when the handler
// never reads it.
func TestHandlerTransportClosesBody(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "refused before reading", http.StatusBadRequest)
	})
	body := &closeRecorder{Reader: strings.NewReader("unread"), closed: make(chan struct{})}
	req, err := http.NewRequest("PUT", "http://agentbox/v1/x", body)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := handlerTransport{h: h}.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	<-body.closed
}
