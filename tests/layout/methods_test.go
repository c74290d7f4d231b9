// Package layout_test checks the shape of the source tree: rules that
// hold across packages and that no one package's tests can see.
package layout_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// root is the tree the checks read, relative to this package.
const root = "../../vmctl"

// maxMethods is the most methods a type under vmctl/ may declare (on it
// and on its pointer; promoted ones not counted), issue 23's bound: a
// type that outgrows it is split by concern into types it embeds (as
// vmctl/daemon's Daemon and vmctl/client's Client are).
const maxMethods = 40

// overMethods are the types allowed more than maxMethods for now, by
// "package-dir.Type" (the directory relative to vmctl/), each with why.
// Empty: every type is within the bound.
var overMethods = map[string]string{}

// generated are the directories (relative to vmctl/) of generated code,
// which the rule does not cover.
var generated = []string{"envd/gen"}

// typeMethods is what one type declares: its method names and the files
// declaring them.
type typeMethods struct {
	methods map[string]bool
	files   map[string]bool
}

// TestMethodsPerType: no type under vmctl/ (non-test files, generated
// code excluded) declares more than maxMethods methods, but those in
// overMethods; and each of those still does (else its entry goes).
func TestMethodsPerType(t *testing.T) {
	types := map[string]*typeMethods{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if slices.Contains(generated, rel) || d.Name() == "testdata" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution|parser.ParseComments)
		if err != nil {
			return err
		}
		if ast.IsGenerated(f) {
			return nil
		}
		dir := filepath.ToSlash(filepath.Dir(rel))
		for _, decl := range f.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok || fd.Recv == nil || len(fd.Recv.List) == 0 {
				continue
			}
			name := recvType(fd.Recv.List[0].Type)
			if name == "" {
				continue
			}
			key := dir + "." + name
			tm := types[key]
			if tm == nil {
				tm = &typeMethods{methods: map[string]bool{}, files: map[string]bool{}}
				types[key] = tm
			}
			// By name: a method declared in files of different build
			// constraints counts once.
			tm.methods[fd.Name.Name] = true
			tm.files[filepath.Base(p)] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if types["client.Client"] == nil || types["daemon.Daemon"] == nil {
		t.Fatalf("no method of client.Client or daemon.Daemon found in %s (%d types): is the test run in its package's directory?", root, len(types))
	}
	for _, key := range slices.Sorted(func(yield func(string) bool) {
		for k := range types {
			if !yield(k) {
				return
			}
		}
	}) {
		tm := types[key]
		n := len(tm.methods)
		why, allowed := overMethods[key]
		switch {
		case n > maxMethods && !allowed:
			t.Errorf("type %s declares %d methods, more than %d, in %s: split it by concern into types it embeds",
				key, n, maxMethods, strings.Join(slices.Sorted(func(yield func(string) bool) {
					for f := range tm.files {
						if !yield(f) {
							return
						}
					}
				}), ", "))
		case n > maxMethods:
			t.Logf("type %s declares %d methods, allowed for now: %s", key, n, why)
		case allowed:
			t.Errorf("type %s declares %d methods, no more than %d: remove its entry (%s) from overMethods", key, n, maxMethods, why)
		}
	}
	for key, why := range overMethods {
		if types[key] == nil {
			t.Errorf("overMethods names %s (%s), which declares no methods: remove its entry", key, why)
		}
	}
}

// recvType is the name of a receiver's type: T of T, *T, T[P] or *T[P].
func recvType(e ast.Expr) string {
	for {
		switch x := e.(type) {
		case *ast.StarExpr:
			e = x.X
		case *ast.ParenExpr:
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.IndexListExpr:
			e = x.X
		case *ast.Ident:
			return x.Name
		default:
			return ""
		}
	}
}
