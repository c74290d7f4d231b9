// Package backendtest is the fake backend.Backend the fronts' tests run
// against (the REST server, the Go client, E2B, envd, MCP, the cluster
// proxy and the CLI): Fake implements Backend and every capability
// interface of vmctl/backend, records its calls and answers each from a
// function field when one is set.
//
// Without one a method answers in one of two ways:
//   - a zero Fake (&Fake{}) answers fixed valid fixtures (Sandbox,
//     Process, File, Snapshot, … of SandboxID at Epoch), for tests of one
//     request's wire form;
//   - a Fake from NewMemory answers from an in-memory service (Memory):
//     sandboxes created, listed and removed, files uploaded and
//     downloaded, and a few scripted commands that run, read stdin and
//     stream output, for tests of a sequence of requests (the CLI's).
//
// Control is a fake backend.ExecControl that records what it is asked.
package backendtest
