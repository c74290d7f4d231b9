package image

import "github.com/agentbox/agentbox/vmctl/errdefs"

// ErrInvalid is wrapped by every error about a malformed image: a bad
// manifest, a missing file, a hash mismatch or a disk that is not qcow2.
// The API answers it 422 invalid_image.
var ErrInvalid = errdefs.New(errdefs.ErrInvalidArgument, "invalid_image", "invalid image")
