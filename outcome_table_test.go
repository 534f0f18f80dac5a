package persona_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/outcome"
)

// TestOutcomeTableMatchesCode keeps the README's outcome-code table and the
// outcome.Code constants declared across the module in step, in both
// directions.
func TestOutcomeTableMatchesCode(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("README.md")
	require.NoError(t, err)
	row := regexp.MustCompile("(?m)^\\| `([a-z0-9_]+)` \\| ([a-z/]+) \\|")
	table := map[string]string{}
	for _, m := range row.FindAllStringSubmatch(string(readme), -1) {
		require.NotContains(t, table, m[1], "code %s listed twice", m[1])
		table[m[1]] = m[2]
	}
	require.NotEmpty(t, table)

	declared := map[string]string{} // code → package path
	fset := token.NewFileSet()
	err = filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "examples") && path != "." {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				if !isCodeType(vs.Type, f.Name.Name) {
					continue
				}
				for _, v := range vs.Values {
					lit, ok := v.(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						continue // an alias of a code declared elsewhere
					}
					code, err := strconv.Unquote(lit.Value)
					require.NoError(t, err)
					declared[code] = filepath.ToSlash(filepath.Dir(path))
				}
			}
		}
		return nil
	})
	require.NoError(t, err)

	for code, pkg := range declared {
		owner, ok := table[code]
		require.True(t, ok, "code %q (declared in %s) is missing from the README table", code, pkg)
		require.Equal(t, lastElem(pkg), owner, "README names the wrong owner for %q", code)
	}
	var extra []string
	for code := range table {
		if _, ok := declared[code]; !ok {
			extra = append(extra, code)
		}
	}
	slices.Sort(extra)
	require.Empty(t, extra, "README lists codes no package declares")
}

// TestOutcomeCatalogueMatchesREADME keeps outcome.Catalogue (what the event
// center shows) equal to the README's table: same codes, owners and
// meanings, in the same order.
func TestOutcomeCatalogueMatchesREADME(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("README.md")
	require.NoError(t, err)
	row := regexp.MustCompile("(?m)^\\| `([a-z0-9_]+)` \\| ([a-z/]+) \\| (.*) \\|$")
	var want []outcome.Info
	for _, m := range row.FindAllStringSubmatch(string(readme), -1) {
		want = append(want, outcome.Info{Code: outcome.Code(m[1]), Owner: m[2], Meaning: m[3]})
	}
	require.NotEmpty(t, want)
	require.Equal(t, want, outcome.Catalogue(), "update outcome/catalogue.go from the README's outcome table")
	for _, c := range want {
		require.Equal(t, c.Meaning, outcome.Meaning(c.Code))
		require.True(t, c.Code.Valid())
	}
}

func isCodeType(e ast.Expr, pkg string) bool {
	switch x := e.(type) {
	case *ast.Ident:
		return pkg == "outcome" && x.Name == "Code"
	case *ast.SelectorExpr:
		id, ok := x.X.(*ast.Ident)
		return ok && id.Name == "outcome" && x.Sel.Name == "Code"
	}
	return false
}

func lastElem(pkg string) string {
	if pkg == "." {
		return "persona"
	}
	return pkg[strings.LastIndex(pkg, "/")+1:]
}
