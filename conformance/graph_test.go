package conformance_test

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/moat-sandbox/moat/"

// allowed lists, for each package, the moat packages it may import
// (directly or not): lower layers never import higher ones (DESIGN.md,
// "Packages"), and conformance is imported only by tests.
//
// nsexec/hostpath, the resolver of a caller's host paths, is a leaf every
// layer may use (its package doc says why it is one package, not a copy in
// each): importing it does not import nsexec.
var allowed = map[string][]string{
	"nsexec/hostpath":     {},
	"ledger":              {hostpath},
	"policies":            {hostpath},
	"seccomp":             {hostpath},
	"cgroups":             {hostpath},
	"conformance/testenv": {},
	"nsexec":              {"seccomp"},
	"nsexec/oci":          {"nsexec", "seccomp"},
	"executor":            {"ledger", "policies", hostpath},
	"executor/subprocess": {"executor", "ledger", "policies", hostpath},
	"executor/container":  {"executor", "ledger", "policies", hostpath},
	"executor/native":     {"executor", "ledger", "policies", "nsexec", "seccomp", "cgroups"},
	"executor/egress":     {"policies", hostpath},
}

const hostpath = "nsexec/hostpath"

// TestImportGraph checks the package graph with go list -deps.
func TestImportGraph(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command here to list the package graph (a VM that only gets compiled tests)")
	}
	out, err := exec.Command(goBin, "list", "-deps", "-f", "{{.ImportPath}}", module+"cmd/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	if !strings.Contains(string(out), module+"executor") {
		t.Fatalf("go list did not list the module's packages:\n%s", out)
	}
	for pkg, ok := range allowed {
		deps, err := exec.Command(goBin, "list", "-deps", "-f", "{{.ImportPath}}", module+pkg).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", pkg, err)
		}
		for _, d := range strings.Fields(string(deps)) {
			dep, ours := strings.CutPrefix(d, module)
			if !ours || dep == pkg || strings.HasPrefix(dep, pkg+"/") || allowedDep(ok, dep) {
				continue
			}
			t.Errorf("%s imports %s, which it may not (allowed: %v)", pkg, dep, ok)
		}
	}
	// Nothing but tests imports the conformance kit.
	deps, err := exec.Command(goBin, "list", "-deps", "-f", "{{.ImportPath}}", module+"cmd/...").Output()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(deps), module+"conformance\n") {
		t.Error("a command imports the conformance kit")
	}
}

func allowedDep(ok []string, dep string) bool {
	for _, a := range ok {
		if dep == a || strings.HasPrefix(dep, a+"/") {
			return true
		}
	}
	return false
}
