package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/conformance/testenv"
)

// runtimeToolsVersion is the runtime-tools module the suite is built from
// (through the Go module proxy, like every other module).
const runtimeToolsVersion = "v0.9.1-0.20251114084447-edf4cb3d2116"

// TestRuntimeTools runs the OCI runtime-tools validation programs against
// moat-runtime and compares each program's result with
// testdata/runtime-tools.expected, which gives the reason of every
// expected failure.
func TestRuntimeTools(t *testing.T) {
	testenv.RequireRoot(t) // the suite creates containers as root, as runc's CI runs it
	goBin, err := exec.LookPath("go")
	if err != nil {
		testenv.Skipf(t, "the runtime-tools suite is built from source and needs the go command")
	}
	bin := runtimeBin(t)
	if _, err := os.Stat(filepath.Join(filepath.Dir(bin), initBinary)); err != nil {
		t.Fatalf("moat-init was not built next to the runtime: %v", err)
	}
	// The suite names no --root: a wrapper gives the runtime one of its
	// own, and whatever the suite leaves there is deleted afterwards.
	stateRoot := t.TempDir()
	rt := filepath.Join(t.TempDir(), "moat-runtime-wrapper")
	if err := os.WriteFile(rt, []byte("#!/bin/sh\nexec "+bin+" --root "+stateRoot+" \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		entries, _ := os.ReadDir(stateRoot)
		for _, e := range entries {
			exec.Command(bin, "--root", stateRoot, "delete", "--force", e.Name()).Run()
		}
	})
	expected := readExpected(t)
	src := runtimeToolsSource(t, goBin)
	results := map[string]string{}
	var names []string
	for name := range expected {
		names = append(names, name)
	}
	sort.Strings(names)
	passed := 0
	for _, name := range names {
		prog := filepath.Join(src, "validation", name, name+".t")
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		cmd := exec.CommandContext(ctx, prog)
		cmd.Dir = src
		cmd.Env = append(os.Environ(), "RUNTIME="+rt)
		out, err := cmd.CombinedOutput()
		cancel()
		got := "fail"
		if err == nil && tapOK(out) {
			got = "pass"
			passed++
		}
		results[name] = got
		want := strings.Fields(expected[name])[0]
		if got != want && want != "either" {
			tail := out
			if len(tail) > 3000 {
				tail = tail[len(tail)-3000:]
			}
			t.Errorf("runtime-tools %s: %s, expected %s (update testdata/runtime-tools.expected if this is a fix)\n%s", name, got, expected[name], tail)
		}
	}
	b, _ := json.Marshal(results)
	t.Logf("runtime-tools %s: %d of %d validation programs pass: %s", runtimeToolsVersion, passed, len(names), b)
}

// tapOK says whether TAP output has at least one "ok" and no "not ok".
func tapOK(out []byte) bool {
	ok := false
	s := bufio.NewScanner(bytes.NewReader(out))
	for s.Scan() {
		line := s.Text()
		if strings.HasPrefix(line, "not ok") {
			return false
		}
		if strings.HasPrefix(line, "ok ") {
			ok = true
		}
	}
	return ok
}

func readExpected(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "runtime-tools.expected"))
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, rest, _ := strings.Cut(line, " ")
		f := strings.Fields(rest)
		if len(f) == 0 || (f[0] != "pass" && f[0] != "fail" && f[0] != "either") || (f[0] != "pass" && len(f) < 2) {
			t.Fatalf("runtime-tools.expected: %q: want NAME pass, NAME fail REASON or NAME either REASON", line)
		}
		m[name] = rest
	}
	return m
}

// runtimeToolsSource downloads the pinned runtime-tools module, copies it
// into a writable directory and builds runtimetest (static, it runs in
// the container) and every validation program there.
func runtimeToolsSource(t *testing.T, goBin string) string {
	t.Helper()
	work := t.TempDir()
	env := append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	dl := exec.Command(goBin, "mod", "download", "-json", "github.com/opencontainers/runtime-tools@"+runtimeToolsVersion)
	dl.Dir, dl.Env = work, env
	out, err := dl.Output()
	var mod struct{ Dir, Error string }
	if err != nil || json.Unmarshal(out, &mod) != nil || mod.Dir == "" {
		testenv.Skipf(t, "the Go module proxy does not serve runtime-tools %s: %v %s", runtimeToolsVersion, err, mod.Error)
	}
	src := filepath.Join(work, "runtime-tools")
	if out, err := exec.Command("cp", "-r", mod.Dir, src).CombinedOutput(); err != nil {
		t.Fatalf("copy runtime-tools: %v: %s", err, out)
	}
	exec.Command("chmod", "-R", "u+w", src).Run()
	os.RemoveAll(filepath.Join(src, "vendor")) // the module zip's vendor tree is incomplete
	build := func(extra []string, args ...string) {
		c := exec.Command(goBin, append([]string{"build"}, args...)...)
		c.Dir, c.Env = src, append(env, extra...)
		if out, err := c.CombinedOutput(); err != nil {
			t.Fatalf("build runtime-tools %v: %v\n%s", args, err, out)
		}
	}
	build([]string{"CGO_ENABLED=0"}, "-o", "runtimetest", "./cmd/runtimetest")
	entries, err := os.ReadDir(filepath.Join(src, "validation"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.IsDir() && e.Name() != "util" {
			build(nil, "-o", filepath.Join("validation", e.Name(), e.Name()+".t"), "./validation/"+e.Name())
		}
	}
	return src
}
