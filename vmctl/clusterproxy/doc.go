// Package clusterproxy makes any node of an agentbox cluster answer for
// any sandbox (serve --cluster; docs/cluster.md, "Routing"). It is the
// apiserver.Router of a clustered daemon:
//
//   - Route: a request of a sandbox (/v1/sandboxes/{id} and below) is
//     looked up in the cluster's directory (vmctl/cluster); a sandbox of
//     this node, or one the directory does not know, is served here (the
//     local lookup decides, as on a single host); one of another node is
//     reverse-proxied to that node's advertised URL, unbuffered (exec
//     output, downloads, watches and WebSocket upgrades pass through as
//     they come). An owner that stopped heartbeating, or whose API cannot
//     be dialled within DialTimeout, is answered 503 node_unreachable at
//     once.
//   - Peer: node-to-node requests carry the cluster token ("Authorization:
//     Bearer", the file of serve --cluster-token-file) and the caller's
//     identity in the X-Agentbox-Caller and X-Agentbox-Tenant headers; the
//     receiving node trusts those headers only with the cluster token and
//     strips them from any other request. X-Agentbox-Forwarded-By marks a
//     forwarded request, which is never forwarded again (loop guard).
//   - List: GET /v1/sandboxes merges this node's sandboxes with each
//     other node's (asked through vmctl/client, with the caller's
//     identity); the entries of a node that does not answer come from the
//     directory, in state "unknown" with reason node_unreachable.
//
// Without --cluster nothing here is installed: a single host serves
// exactly as before.
package clusterproxy
