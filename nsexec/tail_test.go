//go:build linux

package nsexec

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/conformance/testenv"
	"golang.org/x/sys/unix"
)

// The suite runs twice in .ci/test: as this (dynamic) test binary, whose Go
// init stays pid 1, and built static with cgo, whose init hands over to
// the C tail. tailExpected says which one this is; TestInitIsTheTail
// checks that the sandbox agrees, so neither pass tests the other's path
// by mistake.
func tailExpected() bool {
	if !haveTail {
		return false
	}
	f, err := os.Open("/proc/self/exe")
	if err != nil {
		return false
	}
	defer f.Close()
	return staticELF(int(f.Fd()))
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func TestInitIsTheTail(t *testing.T) {
	asRootAndNobody(t, func(t *testing.T) {
		// A cold sandbox keeps its Go init.
		r := mustRun(t, shell(t, "cat /proc/1/comm"))
		if got := strings.TrimSpace(r.stdout); got == "moat-sandbox-in" {
			t.Fatalf("pid 1 of a cold sandbox is %q, want the Go init", got)
		}
		// A prepared sandbox waits in the tail, already handed over.
		s, err := Prepare(context.Background(), &Config{Workdir: workdir(t)})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		comm, err := os.ReadFile("/proc/" + strconv.Itoa(s.Pid()) + "/comm")
		if err != nil {
			t.Fatal(err)
		}
		if tail := strings.TrimSpace(string(comm)) == "moat-sandbox-in"; tail != tailExpected() {
			t.Fatalf("the waiting init is %q, tail expected: %v", comm, tailExpected())
		}
	})
}

// TestSignalQueuedBeforeTheTool: a signal sent to a prepared sandbox before
// its request waits and reaches the tool once it runs, in both inits.
func TestSignalQueuedBeforeTheTool(t *testing.T) {
	asRootAndNobody(t, func(t *testing.T) {
		s, err := Prepare(context.Background(), &Config{Workdir: workdir(t)})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if err := unix.Kill(s.Pid(), unix.SIGUSR1); err != nil {
			t.Fatal(err)
		}
		// The Go init forwards what its subscription queued; give the
		// signal time to be queued before the request.
		time.Sleep(50 * time.Millisecond)
		p, err := s.Exec(context.Background(), []string{"/bin/sleep", "5"}, nil, Stdio{})
		if err != nil {
			t.Fatal(err)
		}
		e, err := p.Wait()
		if err != nil {
			t.Fatal(err)
		}
		if e.Signal != syscall.SIGUSR1 {
			t.Fatalf("the tool ended %+v, want killed by the queued SIGUSR1", e)
		}
	})
}

// TestTailRequestParser: the C tail's request parser and the Go decoder
// accept and refuse the same bodies, hostile ones included, and agree on
// the counts (FuzzWireRequest compares them on random input too).
func TestTailRequestParser(t *testing.T) {
	if !haveTail {
		t.Skip("no C tail in a build without cgo")
	}
	body := func(argc, envc uint32, strs ...string) []byte {
		b := binary.BigEndian.AppendUint32(nil, argc)
		b = binary.BigEndian.AppendUint32(b, envc)
		for _, s := range strs {
			b = append(append(b, s...), 0)
		}
		return b
	}
	cases := map[string][]byte{
		"ok":                body(2, 1, "sh", "-c", "PATH=/bin"),
		"empty arg":         body(2, 0, "sh", ""),
		"short":             {0, 0, 0, 1},
		"no args":           body(0, 1, "PATH=/bin"),
		"empty tool":        body(1, 0, ""),
		"counts too big":    body(0xffffffff, 0xffffffff, "sh"),
		"unterminated":      append(body(1, 0), 's', 'h'),
		"trailing bytes":    append(body(1, 0, "sh"), 'x'),
		"fewer than counts": body(3, 0, "sh", "-c"),
		"env count lies":    body(1, 2, "sh", "A=b"),
	}
	for name, b := range cases {
		argc, total, why := tailParse(b)
		r, err := decodeRequest(b)
		if (why == "") != (err == nil) {
			t.Errorf("%s: the tail says %q, the Go decoder %v", name, why, err)
			continue
		}
		if err == nil && (argc != len(r.Args) || total != len(r.Args)+len(r.Env)) {
			t.Errorf("%s: the tail counts %d args of %d strings, the Go decoder %d and %d", name, argc, total, len(r.Args), len(r.Args)+len(r.Env))
		}
	}
}

// TestTailLookup: the C tail finds a tool by name as the Go init's lookPath
// does: on every PATH of up to three entries drawn from each kind there is
// (an executable, a file without an x bit, a directory of the tool's name,
// symlinks live and dangling, empty and relative entries, missing
// directories), with two PATH= entries, and with none, the two agree on
// the path found or on the errno.
func TestTailLookup(t *testing.T) {
	if !haveTail {
		t.Skip("no C tail in a build without cgo")
	}
	if got := tailDefaultPath(); got != defaultPath {
		t.Fatalf("the tail's default PATH is %q, the Go init's %q", got, defaultPath)
	}
	root := t.TempDir()
	at := func(p string) string { return filepath.Join(root, p) }
	for _, d := range []string{"exe", "plain", "dirs/tool", "link", "dangling", "empty", "cwd/sub"} {
		if err := os.MkdirAll(at(d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string]os.FileMode{"exe/tool": 0o755, "plain/tool": 0o644, "plain/other": 0o755,
		"cwd/tool": 0o644, "cwd/other": 0o755, "cwd/sub/tool": 0o755}
	for f, mode := range files {
		if err := os.WriteFile(at(f), []byte("#!/bin/sh\n"), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(at(f), mode); err != nil { // past the umask
			t.Fatal(err)
		}
	}
	for link, target := range map[string]string{"link/tool": "../exe/tool", "dangling/tool": "missing", "linkdir": "exe"} {
		if err := os.Symlink(target, at(link)); err != nil {
			t.Fatal(err)
		}
	}
	// Empty and relative entries resolve against the working directory.
	t.Chdir(at("cwd"))
	entries := []string{"", ".", "sub", at("exe"), at("plain"), at("dirs"), at("link"),
		at("dangling"), at("linkdir"), at("empty"), at("missing")}
	names := []string{"tool", "other", "absent", "sub/tool", "./tool", at("exe/tool"), "sh"}
	var paths []string
	for _, a := range entries {
		paths = append(paths, a)
		for _, b := range entries {
			paths = append(paths, a+":"+b)
			for _, c := range entries {
				paths = append(paths, a+":"+b+":"+c)
			}
		}
	}
	envs := [][]string{nil, {"HOME=/"}, {"PATH=" + at("exe"), "PATH=" + at("plain")}}
	for _, p := range paths {
		envs = append(envs, []string{"A=b", "PATH=" + p})
	}
	checked := 0
	for _, env := range envs {
		for _, name := range names {
			gp, gerr := lookPath(name, env)
			cp, cerr := tailLookup(name, env)
			if gp != cp || cerr != gerr { // both an Errno or nil
				t.Errorf("%q with env %q: the tail finds %q (%v), the Go init %q (%v)", name, env, cp, cerr, gp, gerr)
			}
			checked++
		}
	}
	t.Logf("%d lookups agree", checked)
}

// TestTailConstants: the tail reports steps by the numbers errors.go gives
// them.
func TestTailConstants(t *testing.T) {
	for step, n := range tailSteps() {
		if int(step) != n {
			t.Errorf("the tail reports step %v as %d, errors.go numbers it %d", step, n, int(step))
		}
	}
}

// TestTailWaitsUnderTheFilter: a prepared sandbox's tail waits for its
// request under the policy's filter already, so it checks first that the
// filter lets it receive one and supervise the tool: a filter that refuses
// recvmsg, wait4 or kill fails Prepare with the syscall and the errno
// named, instead of a sandbox that dies idle or with its tool. The Go init
// receives before its filter, so there a tool runs despite recvmsg.
func TestTailWaitsUnderTheFilter(t *testing.T) {
	for nr, name := range map[uint32]string{unix.SYS_RECVMSG: "recvmsg", unix.SYS_WAIT4: "wait4", unix.SYS_KILL: "kill"} {
		t.Run(name, func(t *testing.T) { tailWaitsUnder(t, nr, name) })
	}
}

func tailWaitsUnder(t *testing.T, nr uint32, name string) {
	if !tailExpected() && nr != unix.SYS_RECVMSG {
		return // the Go init supervises under the filter too: not this test's subject
	}
	s, err := Prepare(context.Background(), &Config{Workdir: workdir(t), Seccomp: denySyscall(t, nr)})
	if !tailExpected() {
		if err != nil {
			t.Fatalf("the Go init: %v", err)
		}
		defer s.Close()
		p, err := s.Exec(context.Background(), []string{"/bin/true"}, nil, Stdio{})
		if err != nil {
			t.Fatalf("the Go init: %v", err)
		}
		if e, err := p.Wait(); err != nil || e.Code != 0 {
			t.Fatalf("the Go init: %+v %v", e, err)
		}
		return
	}
	var se *SetupError
	if !errors.As(err, &se) || se.Errno != unix.EPERM || !strings.Contains(se.Detail, name) {
		t.Fatalf("got %v, want Prepare to fail naming %s and EPERM", err, name)
	}
}

func init() { helpers["prepared-comm"] = helperPreparedComm }

// helperPreparedComm prints pid 1's name in a prepared sandbox.
func helperPreparedComm() error {
	s, err := Prepare(context.Background(), &Config{})
	if err != nil {
		return err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		return err
	}
	p, err := s.Exec(context.Background(), []string{"/bin/cat", "/proc/1/comm"}, nil, Stdio{Stdout: outW})
	outW.Close()
	if err != nil {
		return err
	}
	out, _ := io.ReadAll(outR)
	if e, err := p.Wait(); err != nil || e.Code != 0 {
		return fmt.Errorf("cat /proc/1/comm: %+v %v", e, err)
	}
	fmt.Print(string(out))
	return nil
}

// TestRootLauncherOfMode0700 runs a prepared sandbox from a copy of this
// binary that only root may execute: the sandbox's host id cannot exec it
// for the tail, so the Go init stays pid 1 and the dispatch works; the
// same copy at 0755 hands over to the tail.
func TestRootLauncherOfMode0700(t *testing.T) {
	testenv.RequireRoot(t)
	self, err := os.ReadFile("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		mode os.FileMode
		tail bool
	}{{0o700, false}, {0o755, tailExpected()}} {
		bin := filepath.Join(dir, fmt.Sprintf("launcher-%o", c.mode))
		if err := os.WriteFile(bin, self, c.mode); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin)
		cmd.Env = append(os.Environ(), helperVar+"=prepared-comm")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("mode %o: %v\n%s", c.mode, err, out)
		}
		if tail := strings.TrimSpace(string(out)) == "moat-sandbox-in"; tail != c.tail {
			t.Errorf("mode %o: pid 1 is %q, tail expected: %v", c.mode, out, c.tail)
		}
	}
}

// TestTailNeedsAnExecutableLauncher: the tail's exec runs as the sandbox's
// host identity, so a launcher binary that identity may not execute keeps
// the Go init instead of a Prepare that fails.
func TestTailNeedsAnExecutableLauncher(t *testing.T) {
	id := Identity{UID: 2000000001, GID: 2000000001}
	for _, c := range []struct {
		uid, gid uint32
		mode     uint32
		want     bool
	}{
		{0, 0, 0o755, true},
		{0, 0, 0o750, false},
		{0, 0, 0o700, false},
		{0, 2000000001, 0o750, true},
		{2000000001, 0, 0o700, true},
		{2000000001, 0, 0o077, false}, // the owner's bits decide, as in the kernel
	} {
		st := unix.Stat_t{Uid: c.uid, Gid: c.gid, Mode: unix.S_IFREG | c.mode}
		if got := executableBy(&st, id); got != c.want {
			t.Errorf("owner %d:%d mode %#o: executable %v, want %v", c.uid, c.gid, c.mode, got, c.want)
		}
	}
}
