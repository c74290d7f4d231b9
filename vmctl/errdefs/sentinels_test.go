package errdefs_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// uncategorised lists the package-level sentinels of vmctl/ that may stay
// without an errdefs category, each with the reason (pkg.Name, pkg the
// path below vmctl/).
var uncategorised = map[string]string{
	"client.ErrUnreachable": "a front answering a client error (MCP's tools) answers its missing-socket form 404 not_found (fs.ErrNotExist) and its refused-connection form 500 internal; one category would answer both alike",
}

// keepsInternal lists sentinels that reach a front where they have always
// been answered 500 internal (uncategorised before issue 23): their
// category is errdefs.ErrInternal, the one that keeps that answer (and the
// audit entry's code). Another category would change the REST answer:
// trace the sentinel through api.ErrorFrom (and cmd/agentbox exitStatus)
// before moving one out of this list.
var keepsInternal = []string{
	"agent.ErrDisconnected",
	"agentproto.ErrBadFrameType",
	"agentproto.ErrFrameTooLarge",
	"agentproto.ErrHandshakeRefused",
	"agentproto.ErrNoHandshake",
	"agentproto.ErrProcExists",
	"agentproto.ErrProcTableClosed",
	"agentproto.ErrVersionMismatch",
	"audit.ErrClosed",
	"libvirt.ErrAgentUnavailable",
	"libvirt.ErrDomainNotFound",
	"libvirt.ErrExists",
	"libvirt.ErrNotRunning",
	"network.ErrPoolExhausted",
	"qmp.ErrDisconnected",
}

// sentinel is a package-level exported Err* variable of vmctl/.
type sentinel struct {
	name     string // pkg.Name
	pos      string // file:line
	category string // the errdefs category its errdefs.New names; "" if it is not made by errdefs.New
	plain    bool   // made by errors.New or fmt.Errorf without a category
}

// vmctlSentinels parses every non-test Go file under vmctl/ and returns
// its package-level exported Err* variables that are initialised by a
// call (aliases of other sentinels, e.g. process.ErrNotFound, are not).
func vmctlSentinels(t *testing.T) []sentinel {
	t.Helper()
	root := ".." // the test runs in vmctl/errdefs
	fset := token.NewFileSet()
	var out []sentinel
	files := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if d.Name() == "testdata" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		files++
		rel, _ := filepath.Rel(root, filepath.Dir(path))
		pkg := filepath.ToSlash(rel)
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.VAR {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				if len(vs.Values) != len(vs.Names) {
					continue
				}
				for i, id := range vs.Names {
					if !strings.HasPrefix(id.Name, "Err") || !id.IsExported() {
						continue
					}
					call, ok := vs.Values[i].(*ast.CallExpr)
					if !ok {
						continue
					}
					s := sentinel{name: pkg + "." + id.Name, pos: fset.Position(id.Pos()).String()}
					switch fn := selector(call.Fun); fn {
					case "errdefs.New":
						if len(call.Args) > 0 {
							s.category = selector(call.Args[0])
						}
					case "errors.New":
						s.plain = true
					case "fmt.Errorf":
						s.plain = !wrapsCategory(call)
					default:
						continue // e.g. a constructor of the package's own
					}
					out = append(out, s)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 || len(out) < 50 {
		t.Fatalf("parsed %d files and found %d sentinels under vmctl/: the walk went wrong", files, len(out))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

// selector returns "x.Sel" for a selector expression on an identifier,
// "" for anything else.
func selector(e ast.Expr) string {
	se, ok := e.(*ast.SelectorExpr)
	if !ok {
		return ""
	}
	x, ok := se.X.(*ast.Ident)
	if !ok {
		return ""
	}
	return x.Name + "." + se.Sel.Name
}

// wrapsCategory reports whether a fmt.Errorf call wraps (%w) an errdefs
// value among its arguments.
func wrapsCategory(call *ast.CallExpr) bool {
	if len(call.Args) == 0 {
		return false
	}
	lit, ok := call.Args[0].(*ast.BasicLit)
	if !ok {
		return false
	}
	format, err := strconv.Unquote(lit.Value)
	if err != nil || !strings.Contains(format, "%w") {
		return false
	}
	for _, a := range call.Args[1:] {
		if strings.HasPrefix(selector(a), "errdefs.") {
			return true
		}
	}
	return false
}

// TestEverySentinelHasACategory: a package-level Err* of vmctl/ made with
// errors.New or fmt.Errorf carries no errdefs category, so the fronts
// answer it 500 internal by default and errors.Is finds no category:
// declare it with errdefs.New (pick the category that gives the answer
// the sentinel should have: api.ErrorFrom), or list it in uncategorised
// with the reason.
func TestEverySentinelHasACategory(t *testing.T) {
	seen := map[string]bool{}
	for _, s := range vmctlSentinels(t) {
		seen[s.name] = true
		reason, allowed := uncategorised[s.name]
		switch {
		case s.plain && !allowed:
			t.Errorf("%s: %s has no errdefs category: declare it with errdefs.New(errdefs.ErrX, reason, message)", s.pos, s.name)
		case !s.plain && allowed:
			t.Errorf("%s: %s has a category now: remove it from uncategorised (%s)", s.pos, s.name, reason)
		case !s.plain && (!strings.HasPrefix(s.category, "errdefs.Err") && s.category != ""):
			t.Errorf("%s: %s: errdefs.New's category is %s, not one of the errdefs categories", s.pos, s.name, s.category)
		}
	}
	for name := range uncategorised {
		if !seen[name] {
			t.Errorf("uncategorised lists %s, which is no longer declared", name)
		}
	}
}

// TestInternalSentinelsKeepTheirAnswer: the sentinels that reach a front
// answered 500 internal keep errdefs.ErrInternal (keepsInternal).
func TestInternalSentinelsKeepTheirAnswer(t *testing.T) {
	byName := map[string]sentinel{}
	for _, s := range vmctlSentinels(t) {
		byName[s.name] = s
	}
	for _, name := range keepsInternal {
		s, ok := byName[name]
		switch {
		case !ok:
			t.Errorf("keepsInternal lists %s, which is not declared with a call", name)
		case s.category != "errdefs.ErrInternal":
			t.Errorf("%s: %s is of %q: it reaches a front answered 500 internal, which only errdefs.ErrInternal keeps (see keepsInternal)", s.pos, name, s.category)
		}
	}
}
