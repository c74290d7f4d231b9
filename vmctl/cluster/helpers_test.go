package cluster

import (
	"errors"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/errdefs"
)

func apiReq(name string, vcpus int) api.CreateSandboxRequest {
	return api.CreateSandboxRequest{Image: "/images/base", Name: name, VCPUs: vcpus}
}

func isNotFound(err error) bool { return errors.Is(err, errdefs.ErrNotFound) }
