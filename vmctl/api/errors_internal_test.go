package api

import (
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/vmctl/errdefs"
)

// TestErrorTableRoundTrip: every row of the error table survives the trip
// category (or reason) → ErrorFrom → status and code on the wire → the
// *Error a client decodes, which matches the row's category (and its
// reason's sentinel). Categories answered with the very code and status
// of an earlier row read back as that row's.
func TestErrorTableRoundTrip(t *testing.T) {
	sameWire := map[*errdefs.Error]*errdefs.Error{
		errdefs.ErrAlreadyExists:    errdefs.ErrConflict,    // 409 conflict
		errdefs.ErrCanceled:         errdefs.ErrUnavailable, // 503 unavailable
		errdefs.ErrDeadlineExceeded: errdefs.ErrUnavailable, // 503 unavailable
	}
	firstStatus := map[string]int{}
	for _, m := range errorTable {
		if _, ok := firstStatus[m.code]; !ok {
			firstStatus[m.code] = m.status
		}
		var err error = m.category
		if m.byReason {
			err = errdefs.New(m.category, m.code, "sentinel "+m.code)
		}
		got := ErrorFrom(err)
		if got.Status != m.status || got.Code != m.code {
			t.Errorf("ErrorFrom(%v) = %d %s; want %d %s", err, got.Status, got.Code, m.status, m.code)
			continue
		}
		wire := &Error{Status: got.Status, Code: got.Code}
		want := m.category
		if c, ok := sameWire[m.category]; ok && !m.byReason {
			want = c
		}
		if errdefs.Category(wire) != want {
			t.Errorf("%d %s reads back as %v; want %v", m.status, m.code, errdefs.Category(wire), want)
		}
		if m.byReason && !errors.Is(wire, err) {
			t.Errorf("%d %s does not match its reason's sentinel", m.status, m.code)
		}
	}
	// In a stream only the code travels: its status is its first row's.
	for code, status := range firstStatus {
		if StatusOf(code) != status {
			t.Errorf("StatusOf(%s) = %d, want %d", code, StatusOf(code), status)
		}
	}
	if StatusOf("what") != 500 || categoryOf("what", 404) != errdefs.ErrInternal {
		t.Error("an unknown code is 500 internal")
	}
}

// TestEveryCodeInTable: every Code* constant of the package is a code of
// the error table (so Codes, and the OpenAPI enum checked against it, has
// them all).
func TestEveryCodeInTable(t *testing.T) {
	inTable := map[string]bool{}
	for _, m := range errorTable {
		inTable[m.code] = true
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	n := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, id := range vs.Names {
					if !strings.HasPrefix(id.Name, "Code") || i >= len(vs.Values) {
						continue
					}
					lit, ok := vs.Values[i].(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						continue
					}
					n++
					if code, _ := strconv.Unquote(lit.Value); !inTable[code] {
						t.Errorf("%s = %s is answered by no row of the error table", id.Name, lit.Value)
					}
				}
			}
		}
	}
	if n < len(inTable) {
		t.Errorf("found %d Code* constants, fewer than the table's %d codes", n, len(inTable))
	}
}
