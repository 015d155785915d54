package conformance_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/conformance/testenv"
)

// TestEmbedderWithoutCgo builds testdata/embedder, a module that embeds
// moat through a replace directive as a Go developer's program would, with
// CGO_ENABLED=0 (a static Go binary, no libseccomp), then runs the program
// (a Python tool under the python and default policies) and its test
// binary (the conformance kit over the same provider with the default and
// python policies, isolation and hostile syscall battery included, and the
// refusal of a changed profile) as this user and, as root, as nobody.
func TestEmbedderWithoutCgo(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command here to build the embedder (a VM that only gets compiled tests)")
	}
	if _, err := exec.LookPath("python3"); err != nil {
		testenv.Skipf(t, "no python3 for the embedder's tool: %v", err)
	}
	tree, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	work, err := os.MkdirTemp("", "moat-embedder-")
	if err == nil {
		err = os.Chmod(work, 0o755) // nobody runs what is built here
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(work) })
	src := filepath.Join(work, "src")
	if err := os.CopyFS(src, os.DirFS("testdata/embedder")); err != nil {
		t.Fatal(err)
	}
	// The copy replaces moat by this tree wherever it is, and knows the
	// tree's own checksums, so it builds offline even when this tree has
	// gained a dependency since its go.sum was written.
	sums, err := os.ReadFile(filepath.Join(tree, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	if err := appendFile(filepath.Join(src, "go.sum"), sums); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	env := append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-mod=mod", "GOPROXY=off", "GOWORK=off", "GOTOOLCHAIN=local")
	goRun := func(args ...string) {
		t.Helper()
		cmd := exec.CommandContext(ctx, goBin, args...)
		cmd.Dir, cmd.Env = src, env
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	goRun("mod", "edit", "-replace=github.com/moat-sandbox/moat="+tree)
	program, tests := filepath.Join(work, "embedder"), filepath.Join(work, "embedder.test")
	goRun("build", "-o", program, ".")
	goRun("test", "-c", "-o", tests, ".")

	users := []struct {
		name string
		cred *syscall.Credential
	}{{"as this user", nil}, {"as nobody", &syscall.Credential{Uid: testenv.NobodyUID, Gid: testenv.NobodyGID}}}
	for _, u := range users {
		t.Run(u.name, func(t *testing.T) {
			if u.cred != nil && os.Geteuid() != 0 {
				testenv.Skipf(t, "switching to nobody needs root")
			}
			for _, policy := range []string{"python", "default"} {
				out := runAs(t, ctx, u.cred, program, "-policy", policy)
				if want := "CGO_ENABLED=0, libseccomp: \"\"\n{\"product\": 42}\n"; out != want {
					t.Errorf("the program under %s printed %q, want %q", policy, out, want)
				}
			}
			out := runAs(t, ctx, u.cred, tests, "-test.v", "-test.count=1")
			for _, name := range []string{"TestBuiltWithoutCgo", "TestConformance/default", "TestConformance/python", "TestCustomPolicyRefused"} {
				if !strings.Contains(out, "--- PASS: "+name+" (") {
					t.Errorf("the embedder's tests did not pass %s:\n%s", name, out)
				}
			}
		})
	}
}

// runAs runs a built program as cred (nil: as this process) and returns
// its stdout; it fails t if the program fails.
func runAs(t *testing.T, ctx context.Context, cred *syscall.Credential, path string, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Dir = filepath.Dir(path)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\n%s%s", filepath.Base(path), strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

func appendFile(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(f, "\n%s", b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
