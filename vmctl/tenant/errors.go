package tenant

import (
	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/errdefs"
)

var (
	// ErrQuotaExceeded: a tenant's create would go over one of its quotas
	// (QuotaStore.Reserve), or its snapshot save or port forward over
	// max_snapshots, max_snapshot_mib or max_port_forwards; the API
	// answers 429 tenant_quota, the message says used, limit and asked.
	ErrQuotaExceeded = errdefs.New(errdefs.ErrResourceExhausted, api.CodeTenantQuota, "tenant quota exceeded")
	// ErrPriority: a tenant's create asked a priority class above its
	// max_priority (403 permission_denied).
	ErrPriority = errdefs.New(errdefs.ErrPermissionDenied, "", "priority above the tenant's max_priority")
	// ErrNotGranted: a tenant asked for what only the operator may give
	// or do (a host:PORT rule its host_ports do not list, a port forward
	// off loopback or below 1024, draining a node); 403
	// permission_denied, the message names the limit and says to ask the
	// operator.
	ErrNotGranted = errdefs.New(errdefs.ErrPermissionDenied, "", "not granted to the tenant")
)
