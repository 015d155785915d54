package seccomp_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/moat-sandbox/moat/seccomp/attack"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/moat-sandbox/moat/conformance/testenv"
	"github.com/moat-sandbox/moat/policies"
	"github.com/moat-sandbox/moat/seccomp"
)

// A filter cannot be removed, so every test that loads one does it in a
// re-exec'd copy of this test binary (libseccomp-golang's execInSubprocess,
// Go's syscall exec tests). The copy sees these variables in TestMain, sets
// no_new_privs, loads the program from the file childProgVar names (compiled
// by the parent, as the real sandbox does), then either runs the probe
// battery (childModeVar=probes) or execs childArgsVar (childModeVar=exec).
const (
	childProgVar = "MOAT_SECCOMP_TEST_PROGRAM"
	childModeVar = "MOAT_SECCOMP_TEST_MODE"
	childArgsVar = "MOAT_SECCOMP_TEST_ARGS"
)

func TestMain(m *testing.M) {
	if path := os.Getenv(childProgVar); path != "" {
		os.Exit(child(path))
	}
	os.Exit(m.Run())
}

func child(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	prog, err := seccomp.ParseProgram(b)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		fmt.Fprintln(os.Stderr, "no_new_privs:", err)
		return 2
	}
	if err := seccomp.Load(prog); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	switch os.Getenv(childModeVar) {
	case "probes":
		results := map[string]int{}
		for _, p := range attack.Probes() {
			results[p.Name] = int(p.Run())
		}
		if err := json.NewEncoder(os.Stdout).Encode(results); err != nil {
			return 4
		}
		return 0
	case "exec":
		var args []string
		if err := json.Unmarshal([]byte(os.Getenv(childArgsVar)), &args); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		env := []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/tmp"}
		err := syscall.Exec(args[0], args, env)
		fmt.Fprintln(os.Stderr, "exec:", err)
		return 5
	}
	return 2
}

// runChild compiles nothing: it writes prog for a fresh copy of the test
// binary, runs it in mode, and returns its stdout.
func runChild(t *testing.T, prog seccomp.Program, mode string, args ...string) ([]byte, error) {
	t.Helper()
	b, err := prog.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "prog.bpf")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	enc, _ := json.Marshal(args)
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), childProgVar+"="+path, childModeVar+"="+mode, childArgsVar+"="+string(enc))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	if err != nil {
		t.Logf("child stderr:\n%s", stderr.String())
	}
	return stdout.Bytes(), err
}

func defaultProfile(t testing.TB) *specs.LinuxSeccomp {
	t.Helper()
	p, err := policies.Builtin("default")
	if err != nil {
		t.Fatal(err)
	}
	if p.Seccomp == nil {
		t.Fatal("the default policy has no seccomp profile")
	}
	return p.Seccomp
}

func compile(t testing.TB, s *specs.LinuxSeccomp) seccomp.Program {
	t.Helper()
	prog, err := seccomp.Compile(s)
	if errors.Is(err, errors.ErrUnsupported) {
		testenv.Skipf(t, "this build has no libseccomp: %v", err)
	}
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	return prog
}
