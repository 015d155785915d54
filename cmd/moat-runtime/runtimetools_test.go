package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
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
// expected failure. The same programs run against runc (Debian's, which
// .ci/setup installs) in the same run, beside moat's, for the count the
// two are compared by: runc's results are printed, never checked (they are
// the host's and runc's, not moat's), with every program runc passes and
// moat does not, and its reason from the expected file.
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
	expected := readExpected(t)
	start := time.Now()
	src := runtimeToolsSource(t, goBin)
	built := time.Since(start)
	var names []string
	for name := range expected {
		names = append(names, name)
	}
	sort.Strings(names)

	runcBin, runcErr := exec.LookPath("runc")
	if runcErr != nil && testenv.RequireAll() {
		t.Errorf("runc, which .ci/setup installs, is not here to compare with: %v", runcErr)
	}
	// Both runtimes' runs go side by side (each program waits on its
	// container most of the time), but for the programs that name one
	// fixed cgroupsPath (sharedCgroup), whose runs would meet in that
	// cgroup: those run one runtime after the other.
	var apart, together []string
	for _, name := range names {
		if sharedCgroup(name) {
			apart = append(apart, name)
		} else {
			together = append(together, name)
		}
	}
	var runc map[string]toolResult
	var runcTook time.Duration
	var wg sync.WaitGroup
	if runcErr == nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t0 := time.Now()
			runc = runPrograms(t, src, runcBin, together)
			runcTook = time.Since(t0)
		}()
	}
	t0 := time.Now()
	moat := runPrograms(t, src, bin, together)
	moatTook := time.Since(t0)
	wg.Wait()
	if runcErr == nil {
		t0 := time.Now()
		maps.Copy(runc, runPrograms(t, src, runcBin, apart))
		runcTook += time.Since(t0)
	}
	t0 = time.Now()
	maps.Copy(moat, runPrograms(t, src, bin, apart))
	moatTook += time.Since(t0)

	idmapErr := testenv.IDMappable(os.TempDir())
	results := map[string]string{}
	passed := 0
	for _, name := range names {
		r := moat[name]
		results[name] = r.got
		if r.got == "pass" {
			passed++
		}
		want := strings.Fields(expected[name])[0]
		if want == "idmap" {
			// The suite's root is its bundle directory in $TMPDIR.
			want = "fail"
			if idmapErr == nil {
				want = "pass"
			}
		}
		if r.got != want && want != "either" {
			tail := r.out
			if len(tail) > 3000 {
				tail = tail[len(tail)-3000:]
			}
			t.Errorf("runtime-tools %s: %s, expected %s (update testdata/runtime-tools.expected if this is a fix)\n%s", name, r.got, expected[name], tail)
		}
	}
	b, _ := json.Marshal(results)
	t.Logf("runtime-tools %s: %d of %d validation programs pass with moat-runtime: %s", runtimeToolsVersion, passed, len(names), b)
	if runc == nil {
		t.Logf("runtime-tools: runc not found (%v), moat-runtime %d of %d pass", runcErr, passed, len(names))
		return
	}
	runcPassed := 0
	var only []string
	for _, name := range names {
		if runc[name].got != "pass" {
			continue
		}
		runcPassed++
		if moat[name].got != "pass" {
			// readExpected requires a reason of every line but pass.
			only = append(only, "  "+name+": "+expected[name])
		}
	}
	t.Logf("runtime-tools: runc %d of %d pass, moat-runtime %d (built in %v; runc's run took %v, moat's %v, side by side but for the programs of one fixed cgroup; slowest: %s)",
		runcPassed, len(names), passed, built.Round(time.Second), runcTook.Round(time.Second), moatTook.Round(time.Second), slowest(runc, moat))
	if len(only) > 0 {
		t.Logf("runtime-tools: runc passes and moat-runtime does not:\n%s", strings.Join(only, "\n"))
	}
}

// sharedCgroup says whether a validation program's containers live in
// the one cgroup the suite names for all of them ("/cgrouptest" and the
// like, validation/util): two runtimes running it at once would create,
// read and remove each other's.
func sharedCgroup(name string) bool {
	return strings.HasPrefix(name, "linux_cgroups_") || name == "delete_resources" || name == "delete_only_create_resources"
}

// toolResult is one validation program's result: "pass" or "fail", its
// output, and how long it ran.
type toolResult struct {
	got  string
	out  []byte
	took time.Duration
}

// slowest names the three programs that ran longest with each runtime.
func slowest(runc, moat map[string]toolResult) string {
	var parts []string
	for _, r := range []struct {
		name string
		res  map[string]toolResult
	}{{"runc", runc}, {"moat-runtime", moat}} {
		var names []string
		for n := range r.res {
			names = append(names, n)
		}
		sort.Slice(names, func(i, j int) bool { return r.res[names[i]].took > r.res[names[j]].took })
		var top []string
		for _, n := range names[:min(3, len(names))] {
			top = append(top, fmt.Sprintf("%s %v", n, r.res[n].took.Round(time.Second)))
		}
		parts = append(parts, r.name+" "+strings.Join(top, ", "))
	}
	return strings.Join(parts, "; ")
}

// runPrograms runs each named validation program of src against the
// runtime binary bin, one after the other. The suite names no --root: a
// wrapper gives the runtime one of its own, and whatever the suite leaves
// there is deleted afterwards.
func runPrograms(t *testing.T, src, bin string, names []string) map[string]toolResult {
	dir := t.TempDir()
	stateRoot := filepath.Join(dir, "state")
	rt := filepath.Join(dir, "runtime")
	if err := os.WriteFile(rt, []byte("#!/bin/sh\nexec "+bin+" --root "+stateRoot+" \"$@\"\n"), 0o755); err != nil {
		t.Error(err)
		return map[string]toolResult{}
	}
	defer func() {
		entries, _ := os.ReadDir(stateRoot)
		for _, e := range entries {
			exec.Command(bin, "--root", stateRoot, "delete", "--force", e.Name()).Run()
		}
	}()
	results := map[string]toolResult{}
	for _, name := range names {
		prog := filepath.Join(src, "validation", name, name+".t")
		t0 := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		cmd := exec.CommandContext(ctx, prog)
		cmd.Dir = src
		cmd.Env = append(os.Environ(), "RUNTIME="+rt)
		out, err := cmd.CombinedOutput()
		cancel()
		got := "fail"
		if err == nil && tapOK(out) {
			got = "pass"
		}
		results[name] = toolResult{got, out, time.Since(t0)}
	}
	return results
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
		if len(f) == 0 || (f[0] != "pass" && f[0] != "fail" && f[0] != "either" && f[0] != "idmap") || (f[0] != "pass" && len(f) < 2) {
			t.Fatalf("runtime-tools.expected: %q: want NAME pass, NAME fail REASON, NAME either REASON or NAME idmap REASON", line)
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
