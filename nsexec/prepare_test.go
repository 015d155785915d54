//go:build linux

package nsexec

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// runPrepared sends args to a prepared sandbox and collects its stdout.
func runPrepared(t *testing.T, s *Pending, args, env []string, stdin string) (string, Exit) {
	t.Helper()
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	p, err := s.Exec(context.Background(), args, env, Stdio{Stdin: inR, Stdout: outW, Stderr: outW})
	inR.Close()
	outW.Close()
	if err != nil {
		t.Fatalf("exec %q: %v", args, err)
	}
	go func() { io.WriteString(inW, stdin); inW.Close() }()
	var out bytes.Buffer
	io.Copy(&out, outR)
	outR.Close()
	e, err := p.Wait()
	if err != nil {
		t.Fatal(err)
	}
	return out.String(), e
}

func TestPrepareExec(t *testing.T) {
	asRootAndNobody(t, func(t *testing.T) {
		wd := workdir(t)
		s, err := Prepare(context.Background(), &Config{Workdir: wd})
		if err != nil {
			t.Fatalf("prepare: %v", err)
		}
		out, e := runPrepared(t, s, []string{"sh", "-c", `read x; echo "$x $PPID $(pwd) $FOO"; echo hi > f`},
			[]string{"PATH=/usr/bin:/bin", "FOO=bar"}, "in\n")
		if e.Code != 0 || out != "in 1 /work bar\n" {
			t.Fatalf("got %q, %+v", out, e)
		}
		if b, err := os.ReadFile(wd + "/f"); err != nil || string(b) != "hi\n" {
			t.Fatalf("workdir file: %q %v", b, err)
		}
		if _, err := s.Exec(context.Background(), []string{"/bin/true"}, nil, Stdio{}); !errors.Is(err, ErrUsed) {
			t.Fatalf("second exec: %v, want ErrUsed", err)
		}
	})
}

func TestPrepareExecErrors(t *testing.T) {
	s, err := Prepare(context.Background(), &Config{Workdir: workdir(t)})
	if err != nil {
		t.Fatalf("prepare: %v", err)
	}
	_, err = s.Exec(context.Background(), []string{"no-such-tool"}, []string{"PATH=/usr/bin"}, Stdio{})
	setupErr(t, err, StepExec, nil)
	select {
	case <-s.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the sandbox survived a failed exec")
	}
}

func TestPrepareClose(t *testing.T) {
	s, err := Prepare(context.Background(), &Config{Workdir: workdir(t)})
	if err != nil {
		t.Fatalf("prepare: %v", err)
	}
	pid := s.Pid()
	s.Close()
	select {
	case <-s.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("closed sandbox still running")
	}
	if b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline"); err == nil && strings.Contains(string(b), InitArgv0) {
		t.Fatalf("init %d still exists", pid)
	}
	if _, err := s.Exec(context.Background(), []string{"/bin/true"}, nil, Stdio{}); !errors.Is(err, ErrUsed) {
		t.Fatalf("exec after close: %v, want ErrUsed", err)
	}
}
