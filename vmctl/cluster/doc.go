// Package cluster makes many agentbox hosts one service on NATS
// JetStream (`agentbox serve --cluster`): node membership and capacity
// in a KV bucket with heartbeats, the sandbox directory and
// cluster-unique name claims in KV buckets, and creates as work queues
// per priority class that each node pulls from only when it has room
// (placement follows real capacity; a full cluster queues). Consensus,
// persistence and delivery are JetStream's; the package only decides
// what goes where. docs/cluster.md describes the design.
package cluster
