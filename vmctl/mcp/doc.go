// Package mcp is agentbox's Model Context Protocol server (built on the
// MCP Go SDK): the tools create_sandbox, run_command, start_process,
// read_process_output, kill_process, read_file, write_file,
// list_directory, snapshot, restore, list_snapshots, delete_snapshot,
// list_sandboxes and destroy_sandbox,
// and each sandbox's console and audit log as resources
// (ConsoleURITemplate, AuditURITemplate).
//
// It is a thin translation over the one sandbox service: every call goes
// through vmctl/client to the REST API, so `agentbox mcp` (stdio; to the
// daemon's socket, or to the in-process service with --local) and
// `agentbox serve --mcp` (streamable HTTP at /mcp, the client reaching
// the daemon's own handler in memory, client.NewHandler) run the same
// code, and errors carry the API's codes (ToolError).
//
// Sandboxes created or restored in a session are labelled SessionLabel
// with the session's ID, and the server remembers the snapshots each
// session took; Config.Cleanup removes both when it ends.
//
// Bounds (Config): run_command's stdout and stderr, each OutputLimit
// (64 KiB) with the middle cut and the cut counted; read_process_output,
// twice that per call; read_file and write_file, FileLimit (8 MiB).
package mcp
