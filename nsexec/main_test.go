//go:build linux

package nsexec

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"testing"

	"github.com/moat-sandbox/moat/conformance/testenv"
)

func TestMain(m *testing.M) {
	Init()
	if name := os.Getenv(probeVar); name != "" {
		runProbe(name)
		return
	}
	if name := os.Getenv(helperVar); name != "" {
		runHelper(name)
		return
	}
	testenv.SkipExamples()
	code := m.Run()
	removeRootfs()
	os.Exit(code)
}

// result is what a sandboxed run produced.
type result struct {
	stdout, stderr string
	exit           Exit
}

// run starts cfg and waits for it, collecting stdout and stderr.
func run(t testing.TB, cfg *Config, opts ...Option) (result, error) {
	t.Helper()
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	p, err := Start(context.Background(), cfg, Stdio{Stdout: outW, Stderr: errW}, opts...)
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		return result{}, err
	}
	var out, errb bytes.Buffer
	done := make(chan struct{})
	go func() { io.Copy(&errb, errR); close(done) }()
	io.Copy(&out, outR)
	<-done
	outR.Close()
	errR.Close()
	exit, err := p.Wait()
	if err != nil {
		t.Fatalf("wait: %v", err)
	}
	return result{stdout: out.String(), stderr: errb.String(), exit: exit}, nil
}

// mustRun is run that fails the test on a setup error or a non-zero exit.
func mustRun(t testing.TB, cfg *Config, opts ...Option) result {
	t.Helper()
	r, err := run(t, cfg, opts...)
	if err != nil {
		t.Fatalf("start %q: %v", cfg.Args, err)
	}
	if r.exit.Code != 0 {
		t.Fatalf("%q exited %+v\nstdout: %s\nstderr: %s", cfg.Args, r.exit, r.stdout, r.stderr)
	}
	return r
}

// shell runs script with /bin/sh -c in host mode with a fresh workdir.
func shell(t testing.TB, script string) *Config {
	return &Config{
		Args:    []string{"/bin/sh", "-c", script},
		Env:     []string{"PATH=/usr/bin:/bin", "HOME=/work"},
		Workdir: workdir(t),
	}
}

// workdir makes a fresh 0700 host directory, as a provider would.
func workdir(t testing.TB) string {
	t.Helper()
	d, err := os.MkdirTemp(t.TempDir(), "work-")
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// asRootAndNobody runs body as the current user and, when that is root,
// again as nobody in a copy of the test binary.
func asRootAndNobody(t *testing.T, body func(t *testing.T)) {
	t.Helper()
	if testenv.ReRun() || os.Geteuid() != 0 {
		body(t)
		return
	}
	body(t)
	if t.Failed() {
		return
	}
	testenv.RunAsUser(t, testenv.NobodyUID, testenv.NobodyGID)
}

// setupErr asserts err is a *SetupError of step with errno.
func setupErr(t *testing.T, err error, step Step, errno error) *SetupError {
	t.Helper()
	var se *SetupError
	if !errors.As(err, &se) {
		t.Fatalf("got %v (%T), want a *SetupError of step %v", err, err, step)
	}
	if se.Step != step {
		t.Fatalf("got step %v (%v), want %v", se.Step, err, step)
	}
	if errno != nil && !errors.Is(err, errno) {
		t.Fatalf("got %v, want errno %v", err, errno)
	}
	return se
}
