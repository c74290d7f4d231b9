package agentproto

// This file holds OpMove (rename within the guest) and the ownership
// fields the file operations gained for the E2B data plane.

// OpMove renames a file or directory ([MoveRequest]); FrameResponse with
// the [FileInfo] of the destination (not following a symbolic link). An
// agent older than this operation answers CodeInvalid "unknown op".
const OpMove Op = "move"

// MoveRequest is the request of OpMove.
type MoveRequest struct {
	// Source is the absolute guest path to rename; "/" is refused.
	Source string `json:"source"`
	// Destination is the absolute new path; an existing file there is
	// replaced (rename(2)), an existing non-empty directory is CodeExists.
	// Source and Destination must be on the same guest filesystem
	// (EXDEV is CodeInvalid).
	Destination string `json:"destination"`
	// Parents creates missing parent directories of Destination (mode
	// 0o755, given to Owner).
	Parents bool `json:"parents,omitempty"`
	// Owner is the guest account (name or numeric uid, looked up in
	// /etc/passwd) the directories Parents creates belong to; empty means
	// the agent's default user.
	Owner string `json:"owner,omitempty"`
}

// Validate checks both paths. Errors are *Error with CodeInvalid.
func (r *MoveRequest) Validate() error {
	src, err := CleanPath(r.Source)
	if err != nil {
		return err
	}
	if _, err := CleanPath(r.Destination); err != nil {
		return err
	}
	if src == "/" {
		return invalidf("refusing to move /")
	}
	return nil
}
