package agentproto

import "strings"

// uploadTempInfix separates an upload's destination name from the random
// number in its temporary file's name (see [UploadTempPattern]).
const uploadTempInfix = ".agentbox-"

// UploadTempPattern is the os.CreateTemp pattern of the temporary file the
// guest agent writes an upload (OpWrite) for the file NAME into, in NAME's
// directory, before renaming it onto NAME: "." + NAME + ".agentbox-*",
// where os.CreateTemp replaces "*" by a random uint32 in decimal (e.g.
// ".w.txt.agentbox-824410569"). Watchers use [UploadTempTarget] to hide it.
func UploadTempPattern(name string) string {
	return "." + name + uploadTempInfix + "*"
}

// UploadTempTarget reports whether base (a file name without directory)
// is the name of an upload's temporary file made from [UploadTempPattern],
// and if so the NAME it is renamed onto. It matches exactly: a leading
// ".", a non-empty NAME, ".agentbox-", then 1 to 10 decimal digits whose
// value fits a uint32.
func UploadTempTarget(base string) (name string, ok bool) {
	rest, ok := strings.CutPrefix(base, ".")
	if !ok {
		return "", false
	}
	i := strings.LastIndex(rest, uploadTempInfix)
	if i <= 0 {
		return "", false
	}
	digits := rest[i+len(uploadTempInfix):]
	if len(digits) == 0 || len(digits) > 10 {
		return "", false
	}
	var n uint64
	for _, c := range digits {
		if c < '0' || c > '9' {
			return "", false
		}
		n = n*10 + uint64(c-'0')
	}
	if n > 1<<32-1 {
		return "", false
	}
	return rest[:i], true
}
