package client_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// maxMethods is the most methods a type of this package may declare (on
// it and on its pointer; promoted ones not counted), issue 23's bound: a
// Client that outgrows it gets a new per-resource type embedded.
const maxMethods = 40

// TestMethodsPerType: no type of the package declares more than
// maxMethods methods.
func TestMethodsPerType(t *testing.T) {
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	count := map[string]int{}
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Recv == nil || len(fd.Recv.List) == 0 {
				continue
			}
			if name := recvType(fd.Recv.List[0].Type); name != "" {
				count[name]++
			}
		}
	}
	if count["Client"] == 0 {
		t.Fatalf("no method of Client found (counted %v): is the test run in the package's directory?", count)
	}
	for name, n := range count {
		if n > maxMethods {
			t.Errorf("type %s declares %d methods, more than %d: move some to a per-resource type that Client embeds", name, n, maxMethods)
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
