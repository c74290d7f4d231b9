package profile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
)

// nixpkgs returns the revision and NAR hash of the flake's nixpkgs input,
// from `nix flake metadata --json` (its "locks" are the flake.lock nix
// uses, local or remote flake alike); both empty when the flake has no
// nixpkgs input.
func (r *Resolver) nixpkgs(ctx context.Context) (rev, narHash string, err error) {
	out, err := r.runNix(ctx, nil, "flake", "metadata", "--json", r.flake)
	if err != nil {
		return "", "", fmt.Errorf("read the inputs of flake %s: %w", r.flake, err)
	}
	rev, narHash, err = nixpkgsFromMetadata(out)
	if err != nil {
		return "", "", fmt.Errorf("read the inputs of flake %s: %w", r.flake, err)
	}
	return rev, narHash, nil
}

// lockNode is a node of a flake.lock (format version 7): its inputs map an
// input name to a node name, or to a path of input names from the root
// (an input that "follows" another).
type lockNode struct {
	Inputs map[string]json.RawMessage `json:"inputs"`
	Locked struct {
		Rev     string `json:"rev"`
		NarHash string `json:"narHash"`
	} `json:"locked"`
}

// nixpkgsFromMetadata finds the root's "nixpkgs" input in the "locks" of
// `nix flake metadata --json` output and returns its locked rev and
// narHash (empty without such an input).
func nixpkgsFromMetadata(data []byte) (rev, narHash string, err error) {
	var meta struct {
		Locks struct {
			Nodes map[string]lockNode `json:"nodes"`
			Root  string              `json:"root"`
		} `json:"locks"`
	}
	if err := json.Unmarshal(data, &meta); err != nil {
		return "", "", fmt.Errorf("nix flake metadata --json: %w", err)
	}
	nodes := meta.Locks.Nodes
	node, ok, err := followInput(nodes, meta.Locks.Root, meta.Locks.Root, []string{"nixpkgs"}, 0)
	if err != nil || !ok {
		return "", "", err
	}
	n := nodes[node]
	return n.Locked.Rev, n.Locked.NarHash, nil
}

// followInput resolves path (input names, starting at node from) to a node
// name; ok is false when an input does not exist. A "follows" list starts
// at node root. depth bounds "follows" chains.
func followInput(nodes map[string]lockNode, root, from string, path []string, depth int) (node string, ok bool, err error) {
	if depth > 32 {
		return "", false, errors.New("flake.lock: input follows form a cycle")
	}
	cur := from
	for _, in := range path {
		raw, ok := nodes[cur].Inputs[in]
		if !ok {
			return "", false, nil
		}
		var target string
		if err := json.Unmarshal(raw, &target); err == nil {
			cur = target
			continue
		}
		var follows []string
		if err := json.Unmarshal(raw, &follows); err != nil {
			return "", false, fmt.Errorf("flake.lock: input %s of node %s is %s: want a node name or a list of input names", in, cur, raw)
		}
		next, ok, err := followInput(nodes, root, root, follows, depth+1)
		if err != nil || !ok {
			return "", ok, err
		}
		cur = next
	}
	if _, ok := nodes[cur]; !ok {
		return "", false, fmt.Errorf("flake.lock: input node %q does not exist", cur)
	}
	return cur, true, nil
}

// DefaultLockFile returns where the lock file of flake lives by default:
// agentbox.lock in the flake's directory when the flake is a local
// directory outside the Nix store (".", "./dir", "/abs/dir", "path:DIR",
// "git+file:///DIR?dir=SUB"), else agentbox.lock in the current directory
// (a remote flake, or the read-only store copy that `nix run
// .#agentbox` knows its flake by).
func DefaultLockFile(flake string) string {
	dir, ok := localFlakeDir(flake)
	if !ok || dir == "/nix/store" || strings.HasPrefix(dir, "/nix/store/") {
		return DefaultLockName
	}
	return filepath.Join(dir, DefaultLockName)
}

// localFlakeDir returns the directory of a local flake reference.
func localFlakeDir(ref string) (string, bool) {
	ref, query, _ := strings.Cut(ref, "?")
	switch {
	case strings.HasPrefix(ref, "path:"):
		ref = strings.TrimPrefix(ref, "path:")
	case strings.HasPrefix(ref, "git+file://"):
		ref = strings.TrimPrefix(ref, "git+file://")
	case ref == "." || ref == ".." || strings.HasPrefix(ref, "/") || strings.HasPrefix(ref, "./") || strings.HasPrefix(ref, "../"):
	default:
		return "", false
	}
	if ref == "" {
		return "", false
	}
	if q, err := url.ParseQuery(query); err == nil && q.Get("dir") != "" {
		ref = filepath.Join(ref, q.Get("dir"))
	}
	return filepath.Clean(ref), true
}
