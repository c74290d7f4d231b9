// Package client is the Go client of the agentbox daemon's REST API
// (vmctl/api), used by the agentbox CLI.
//
//	cl := client.New("/run/agentbox/agentbox.sock")            // unix socket
//	cl, err := client.NewTCP("https://h:7070", client.WithToken(tok))
//	sb, err := cl.CreateSandbox(ctx, api.CreateSandboxRequest{Image: dir, Name: "work1"})
//	st, err := cl.Exec(ctx, "work1", api.ExecRequest{Cmd: argv}, os.Stdout, os.Stderr)
//
// Every method takes a ctx; cancelling it aborts the request, and for an
// exec the daemon then kills the command.
//
// Errors:
//   - The daemon's error answers come back as *api.Error with Status, Code,
//     Message and Details (JSON numbers as float64) decoded; use errors.As,
//     or errors.Is with an errdefs category (errdefs.ErrNotFound for a
//     404) or a sentinel of the code's reason (api.Error.Is).
//     An "error" event inside an exec or output stream is an *api.Error too,
//     its Status from api.StatusOf(Code). An error answer that is not the
//     API's JSON (a proxy's) becomes an *api.Error with api.CodeOf(status).
//   - When nothing listens (socket file missing, or connection refused on
//     the socket or TCP port) the error wraps ErrUnreachable and the dial
//     error (errors.Is finds fs.ErrNotExist or syscall.ECONNREFUSED):
//     `agentbox run` falls back to running in-process on that.
//   - An exec stream that ends without the command's exit status is the
//     error "daemon closed the exec stream before the command's exit
//     status"; other cut streams are read errors naming the route.
//
// Bodies are streamed both ways: Upload and WriteStdin send their reader
// as it reads (chunked), Download, Exec, ProcessOutput, Console, Audit and
// Events hand data on as it arrives; nothing is held in memory whole.
package client
