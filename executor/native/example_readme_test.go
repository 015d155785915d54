package native_test

import (
	"bytes"
	"flag"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strings"
	"testing"
)

var updateReadme = flag.Bool("update-readme", false, "rewrite README.md's library snippet from ExampleNew")

// readmeMarker leads the README's library snippet, which is ExampleNew's
// body in a main function: go test runs the example, so the snippet
// cannot rot unseen.
const readmeMarker = "<!-- ExampleNew in executor/native/example_test.go, which go test runs; regenerate with: go test ./executor/native -run TestReadmeShowsExampleNew -update-readme -->\n"

// TestReadmeShowsExampleNew fails when README.md's library snippet is not
// ExampleNew (its Output comment left out); -update-readme rewrites it.
func TestReadmeShowsExampleNew(t *testing.T) {
	want := exampleAsMain(t, "example_test.go", "ExampleNew")
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(readme, []byte(readmeMarker))
	if i < 0 {
		t.Fatalf("README.md has no line %q before its library snippet", readmeMarker)
	}
	start := i + len(readmeMarker)
	fence := "```go\n"
	end := bytes.Index(readme[start:], []byte("\n```\n"))
	if !bytes.HasPrefix(readme[start:], []byte(fence)) || end < 0 {
		t.Fatalf("README.md: no ```go block right after %q", readmeMarker)
	}
	got := string(readme[start+len(fence) : start+end+1])
	if got == want {
		return
	}
	if !*updateReadme {
		t.Fatalf("README.md's library snippet is not ExampleNew; run go test ./executor/native -run TestReadmeShowsExampleNew -update-readme\n--- README.md\n%s--- ExampleNew\n%s", got, want)
	}
	out := append(append(append([]byte{}, readme[:start+len(fence)]...), want...), readme[start+end+1:]...)
	if err := os.WriteFile("../../README.md", out, 0o644); err != nil {
		t.Fatal(err)
	}
}

// exampleAsMain returns the body of the example name in file as the body
// of func main, without its Output comment.
func exampleAsMain(t *testing.T, file, name string) string {
	t.Helper()
	src, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, file, src, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || fn.Name.Name != name {
			continue
		}
		body := string(src[fset.Position(fn.Body.Lbrace).Offset+1 : fset.Position(fn.Body.Rbrace).Offset])
		if i := strings.Index(body, "\t// Output:"); i >= 0 {
			body = body[:i]
		}
		return "func main() {" + strings.TrimRight(body, "\n\t") + "\n}\n"
	}
	t.Fatalf("%s: no %s", file, name)
	return ""
}
