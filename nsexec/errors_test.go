//go:build linux

package nsexec

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

func TestExecMissingTool(t *testing.T) {
	asRootAndNobody(t, func(t *testing.T) {
		for _, tool := range []string{"/nonexistent/tool", "no-such-tool"} {
			_, err := run(t, &Config{Args: []string{tool}, Env: []string{"PATH=/usr/bin"}})
			se := setupErr(t, err, StepExec, unix.ENOENT)
			if se.Hint == "" {
				t.Errorf("%s: no hint in %v", tool, err)
			}
		}
	})
}

func TestExecNotExecutable(t *testing.T) {
	asRootAndNobody(t, func(t *testing.T) {
		_, err := run(t, &Config{Args: []string{"/etc/passwd"}})
		setupErr(t, err, StepExec, unix.EACCES)
	})
}

func TestMissingRootfs(t *testing.T) {
	asRootAndNobody(t, func(t *testing.T) {
		missing := filepath.Join(t.TempDir(), "no-rootfs")
		_, err := run(t, &Config{Rootfs: missing, Args: []string{"/bin/true"}})
		if se := setupErr(t, err, StepRootfs, unix.ENOENT); se.Path != missing {
			t.Fatalf("path %q, want %q", se.Path, missing)
		}
	})
}

func TestMissingBindSource(t *testing.T) {
	asRootAndNobody(t, func(t *testing.T) {
		missing := filepath.Join(t.TempDir(), "no-source")
		cfg := shell(t, "true")
		cfg.Mounts = []specs.Mount{{Source: missing, Destination: "/data"}}
		_, err := run(t, cfg)
		if se := setupErr(t, err, StepBind, unix.ENOENT); se.Path != missing {
			t.Fatalf("path %q, want %q", se.Path, missing)
		}
	})
}

func TestBindReadOnlyAndReadWrite(t *testing.T) {
	asRootAndNobody(t, func(t *testing.T) {
		ro, rw := t.TempDir(), t.TempDir()
		os.Chmod(rw, 0o777)
		cfg := shell(t, "touch /data/ro/x 2>/dev/null && echo ro-writable; touch /data/rw/x && echo rw-ok")
		cfg.Mounts = []specs.Mount{
			{Source: ro, Destination: "/data/ro", Options: []string{"ro"}},
			{Source: rw, Destination: "/data/rw", Options: []string{"rw"}},
		}
		if r := mustRun(t, cfg); r.stdout != "rw-ok\n" {
			t.Fatalf("got %q, %q", r.stdout, r.stderr)
		}
	})
}

func TestSeccompInForce(t *testing.T) {
	asRootAndNobody(t, func(t *testing.T) {
		cfg := probeConfig(t, "mkdir")
		cfg.Seccomp = denyMkdirat(t)
		if r := mustRun(t, cfg); r.stdout != "mkdirat: operation not permitted\nSeccomp: 2\n" {
			t.Fatalf("with the filter: %q", r.stdout)
		}
		if r := mustRun(t, probeConfig(t, "mkdir")); r.stdout != "mkdirat: <nil>\nSeccomp: 0\n" {
			t.Fatalf("without a filter: %q", r.stdout)
		}
	})
}

func TestUserNamespacesUnavailable(t *testing.T) {
	asRootAndNobody(t, func(t *testing.T) {
		out := runHelperProcess(t, "nouserns")
		for _, want := range []string{"step=clone", "errno=" + unix.EPERM.Error(), "hint=", "user namespace"} {
			if !strings.Contains(out, want) {
				t.Fatalf("helper output %q lacks %q", out, want)
			}
		}
	})
}

func TestNotWired(t *testing.T) {
	asRootAndNobody(t, func(t *testing.T) {
		// A program that exits without calling Init.
		_, err := run(t, shell(t, "true"), WithInitPath("/bin/true"))
		if !errors.Is(err, ErrNotWired) {
			t.Fatalf("exiting init: got %v, want ErrNotWired", err)
		}
		// A program that never answers.
		script := filepath.Join(t.TempDir(), "hang")
		if err := os.WriteFile(script, []byte("#!/bin/sh\nexec sleep 60\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		os.Chmod(filepath.Dir(script), 0o755)
		begin := time.Now()
		_, err = run(t, shell(t, "true"), WithInitPath(script), WithHandshakeTimeout(200*time.Millisecond))
		if !errors.Is(err, ErrNotWired) || !strings.Contains(err.Error(), "nsexec.Init()") {
			t.Fatalf("hanging init: got %v, want ErrNotWired naming nsexec.Init()", err)
		}
		if time.Since(begin) > 30*time.Second {
			t.Fatalf("the hanging init was not killed at the timeout")
		}
	})
}

func TestNested(t *testing.T) {
	t.Setenv(initFDEnv, "3")
	initCalled.Store(false)
	defer initCalled.Store(true)
	if _, err := Start(context.Background(), shell(t, "true"), Stdio{}); !errors.Is(err, ErrNested) {
		t.Fatalf("got %v, want ErrNested", err)
	}
}

func TestPlacement(t *testing.T) {
	asRootAndNobody(t, func(t *testing.T) {
		placed := 0
		p, err := Start(context.Background(), shell(t, "true"), Stdio{}, WithPlacement(func(pid int) error {
			placed = pid
			return nil
		}))
		if err != nil {
			t.Fatal(err)
		}
		if placed == 0 || placed != p.Pid() {
			t.Fatalf("placement saw pid %d, the process is %d", placed, p.Pid())
		}
		if e, err := p.Wait(); err != nil || e.Code != 0 {
			t.Fatalf("wait: %+v %v", e, err)
		}
		// A placement failure kills the child before the tool runs.
		wd := workdir(t)
		cfg := shell(t, "touch /work/ran")
		cfg.Workdir = wd
		boom := errors.New("no cgroup")
		_, err = Start(context.Background(), cfg, Stdio{}, WithPlacement(func(int) error { return boom }))
		if !errors.Is(err, boom) {
			t.Fatalf("got %v, want the placement error", err)
		}
		if _, err := os.Stat(filepath.Join(wd, "ran")); err == nil {
			t.Fatal("the tool ran although the placement failed")
		}
	})
}

func TestSignal(t *testing.T) {
	asRootAndNobody(t, func(t *testing.T) {
		p, err := Start(context.Background(), shell(t, "exec sleep 60"), Stdio{})
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Signal(unix.SIGKILL); err != nil {
			t.Fatal(err)
		}
		e, err := p.Wait()
		if err != nil || e.Code != -1 || e.Signal != unix.SIGKILL {
			t.Fatalf("after SIGKILL: %+v, %v", e, err)
		}
	})
}

func TestConfigRejected(t *testing.T) {
	for name, cfg := range map[string]*Config{
		"no args":     {},
		"network":     {Args: []string{"true"}, Network: "host"},
		"version":     {Args: []string{"true"}, Version: 99},
		"relative":    {Args: []string{"true"}, Mounts: []specs.Mount{{Source: "/", Destination: "rel"}}},
		"mount flags": {Args: []string{"true"}, Mounts: []specs.Mount{{Source: "/", Destination: "/x", Options: []string{"suid"}}}},
	} {
		if _, err := Start(context.Background(), cfg, Stdio{}); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
