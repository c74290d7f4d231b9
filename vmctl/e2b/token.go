package e2b

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// AccessKeyFile is the name, in the daemon's state directory, of the key
// envd access tokens are derived from (LoadAccessKey).
const AccessKeyFile = "e2b-access.key"

// accessKeyBytes is the length of the access key.
const accessKeyBytes = 32

// LoadAccessKey returns the key in dir/AccessKeyFile, making it (32
// random bytes, mode 0600) when the file does not exist: tokens then stay
// valid across restarts of the daemon, and removing the file revokes all
// of them. Errors: the file cannot be read or made, may be read by other
// users than its owner (whoever reads it has every sandbox's data plane;
// the message says to chmod it), or holds a key of the wrong length (the
// message says to remove it).
func LoadAccessKey(dir string) ([]byte, error) {
	path := filepath.Join(dir, AccessKeyFile)
	key, err := readPrivate(path)
	if err == nil {
		if len(key) != accessKeyBytes {
			return nil, fmt.Errorf("E2B access key %s holds %d bytes, want %d: remove it (a new one is made; tokens handed out so far stop working)", path, len(key), accessKeyBytes)
		}
		return key, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	key = make([]byte, accessKeyBytes)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return LoadAccessKey(dir) // made meanwhile by another process
	}
	if err != nil {
		return nil, fmt.Errorf("E2B access key: %w", err)
	}
	if _, err := f.Write(key); err != nil {
		f.Close()
		os.Remove(path)
		return nil, fmt.Errorf("E2B access key: %w", err)
	}
	if err := f.Close(); err != nil {
		os.Remove(path)
		return nil, fmt.Errorf("E2B access key: %w", err)
	}
	return key, nil
}

// readPrivate reads the key file at path, refusing one that group or
// others may read.
func readPrivate(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("E2B access key: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("E2B access key: %w", err)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("E2B access key %s may be read by other users (mode %04o): chmod 600 it, or remove it (a new one is made; tokens handed out so far stop working)", path, perm)
	}
	key, err := io.ReadAll(f)
	if err != nil {
		return nil, fmt.Errorf("E2B access key: %w", err)
	}
	return key, nil
}

// accessToken is the envd access token of sandbox id: an HMAC-SHA256 of
// the ID under key, in hex. Stateless: any process with the key derives
// it, nothing is stored per sandbox.
func accessToken(key []byte, id string) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte("agentbox e2b envd access token\x00" + id))
	return hex.EncodeToString(m.Sum(nil))
}

// validAccessToken reports in constant time whether tok is sandbox id's
// access token.
func validAccessToken(key []byte, id, tok string) bool {
	want := accessToken(key, id)
	return len(tok) == len(want) && subtle.ConstantTimeCompare([]byte(tok), []byte(want)) == 1
}
