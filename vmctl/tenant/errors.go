package tenant

import (
	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/errdefs"
)

var (
	// ErrQuotaExceeded: a tenant's create would go over one of its quotas
	// (QuotaStore.Reserve); the API answers 429 tenant_quota, the message
	// says used, limit and asked.
	ErrQuotaExceeded = errdefs.New(errdefs.ErrResourceExhausted, api.CodeTenantQuota, "tenant quota exceeded")
	// ErrPriority: a tenant's create asked a priority class above its
	// max_priority (403 permission_denied).
	ErrPriority = errdefs.New(errdefs.ErrPermissionDenied, "", "priority above the tenant's max_priority")
)
