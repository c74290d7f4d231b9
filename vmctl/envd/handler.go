package envd

import (
	"context"
	"net/http"

	"connectrpc.com/connect"

	"github.com/agentbox/agentbox/vmctl/client"
	"github.com/agentbox/agentbox/vmctl/envd/gen/process/processconnect"
)

// Options configure the data plane.
type Options struct {
	// DefaultUser is the guest user a request without one runs as (E2B's
	// SDK sends none from envd 0.4.0 on and expects the sandbox's default
	// user); empty means "user".
	DefaultUser string
}

// NewHandler returns the data plane's handler: the Connect services and
// the plain HTTP routes envd serves, for requests whose context carries a
// sandbox ID (WithSandbox). c reaches the sandbox service (in the daemon:
// client.NewHandler over the API's own handler).
func NewHandler(c *client.Client, o Options) http.Handler {
	if o.DefaultUser == "" {
		o.DefaultUser = "user"
	}
	mux := http.NewServeMux()
	// Each service registers its routes here (one line each).
	mux.Handle(processconnect.NewProcessHandler(newProcessService(c, o), handlerOptions...))
	mountFiles(mux, c, o)
	mountFilesystem(mux, c, o)
	return mux
}

// MaxMessageBytes is the largest request message the Connect services
// read, in bytes (16 MiB), after decompression: a larger one (stdin of
// SendInput, most likely; send it in pieces) is answered
// resource_exhausted before it is held in memory, and a small gzip
// body cannot expand past it.
const MaxMessageBytes = 16 << 20

// handlerOptions are the options of every Connect service's handler.
var handlerOptions = []connect.HandlerOption{connect.WithReadMaxBytes(MaxMessageBytes)}

type sandboxKey struct{}

// WithSandbox returns ctx carrying the ID of the sandbox a data-plane
// request is for (from the E2b-Sandbox-Id header, checked by the front).
func WithSandbox(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, sandboxKey{}, id)
}

// SandboxFrom returns the sandbox ID WithSandbox put in ctx, or "".
func SandboxFrom(ctx context.Context) string {
	id, _ := ctx.Value(sandboxKey{}).(string)
	return id
}
