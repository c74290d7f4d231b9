package api

import "slices"

// Priority classes of a create (CreateSandboxRequest.Priority): a tenant's
// creates may ask at most its max_priority (serve --tenants). A single
// host records the class; a cluster serves higher classes first.
const (
	PriorityLow    = "low"
	PriorityNormal = "normal"
	PriorityHigh   = "high"
)

// Priorities are the priority classes, lowest first.
var Priorities = []string{PriorityLow, PriorityNormal, PriorityHigh}

// PriorityRank returns the rank of a priority class (0 low, 1 normal,
// 2 high; "" is normal) and whether p is one.
func PriorityRank(p string) (int, bool) {
	if p == "" {
		p = PriorityNormal
	}
	i := slices.Index(Priorities, p)
	return i, i >= 0
}

// CodeTenantQuota is the 429 of a create, snapshot save or port forward
// refused because the caller's tenant has reached a quota of its own
// (serve --tenants: max_sandboxes, max_vcpus, max_memory_mib,
// max_snapshots, max_snapshot_mib, max_port_forwards); the message says
// used, limit and asked.
const CodeTenantQuota = "tenant_quota"
