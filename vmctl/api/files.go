package api

import "io/fs"

// UploadRequest holds the query parameters of PUT
// /v1/sandboxes/{id}/files.
type UploadRequest struct {
	// Path is the absolute guest path of the file.
	Path string
	// Mode is the new file's permission bits (setuid, setgid and sticky
	// count); 0 means 0644.
	Mode fs.FileMode
	// Parents creates missing parent directories (0755).
	Parents bool
	// Owner is the guest account (name or numeric uid) the file and the
	// directories made belong to; empty means the guest agent's default
	// user.
	Owner string
}

// MaxListDepth is the deepest listing GET /v1/sandboxes/{id}/files/list
// gives (its depth parameter).
const MaxListDepth = 64

// MaxListEntries is the most entries GET /v1/sandboxes/{id}/files/list
// answers, all directories of a walk (depth > 1) together; a larger
// listing is answered 413 too_large naming the limit (details "limit" and
// "count"). One directory is held to the same number by the host's agent
// client (vmctl/agent.MaxListEntries), whatever the guest sends.
const MaxListEntries = 100_000

// MoveRequest is the body of POST /v1/sandboxes/{id}/files/move.
type MoveRequest struct {
	// Source is the absolute guest path to rename.
	Source string `json:"source"`
	// Destination is its absolute new path. An existing file there is
	// replaced, an empty directory too when Source is a directory;
	// source and destination must be on the same guest filesystem.
	Destination string `json:"destination"`
	// Parents creates missing parent directories of Destination.
	Parents bool `json:"parents,omitempty"`
	// Owner is the guest account (name or numeric uid) the directories
	// Parents makes belong to; empty means the guest agent's default user.
	Owner string `json:"owner,omitempty"`
}

// Validate checks a move request and cleans its paths. Errors are 400
// invalid_argument.
func (req *MoveRequest) Validate() error {
	src, err := CleanGuestPath("source", req.Source)
	if err != nil {
		return err
	}
	dst, err := CleanGuestPath("destination", req.Destination)
	if err != nil {
		return err
	}
	if src == "/" {
		return Invalidf("source / cannot be moved")
	}
	if err := CheckOwner("owner", req.Owner); err != nil {
		return err
	}
	req.Source, req.Destination = src, dst
	return nil
}

// CheckOwner checks an Owner field, or another name of a guest account
// (the user of an E2B data-plane request): empty, or a name or numeric
// uid as ExecRequest.User takes it (UserPattern: one syntax of account
// names). Errors are 400 invalid_argument.
func CheckOwner(what, owner string) error {
	if owner != "" && !userRE.MatchString(owner) {
		return Invalidf("%s %s is not a guest account: give a user name (such as root) or a numeric uid", what, QuoteShort(owner))
	}
	return nil
}
