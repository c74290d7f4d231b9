package image

import "errors"

// ErrInvalid is wrapped by every error about a malformed image: a bad
// manifest, a missing file, a hash mismatch or a disk that is not qcow2.
var ErrInvalid = errors.New("invalid image")
