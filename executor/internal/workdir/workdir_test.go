//go:build linux

package workdir

import (
	"bufio"
	"bytes"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/conformance/testenv"
	"golang.org/x/sys/unix"
)

// helperVar makes the test binary a helper that creates a workdir in the
// base it names, prints its path and waits to be killed.
const helperVar = "MOAT_WORKDIR_HELPER"

// prefixVar, when set, is the helper's workdir prefix.
const prefixVar = "MOAT_WORKDIR_PREFIX"

func TestMain(m *testing.M) {
	// Markers of this test binary's own, apart from any other moat's.
	root := os.Getenv("MOAT_WORKDIR_MARKERS")
	if root == "" {
		var err error
		if root, err = os.MkdirTemp("/dev/shm", "moat-workdir-test-"); err != nil {
			panic(err)
		}
	}
	os.Chmod(root, 0o1777)
	os.Setenv("MOAT_WORKDIR_MARKERS", root)
	markerRoot = root
	if base := os.Getenv(helperVar); base != "" {
		prefix := "moat-run-"
		if p, ok := os.LookupEnv(prefixVar); ok {
			prefix = p
		}
		d, err := Create(base, prefix, slog.New(slog.DiscardHandler))
		if err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(1)
		}
		os.WriteFile(filepath.Join(d.Path, "left"), []byte("x"), 0o600)
		os.Stdout.WriteString(d.Path + "\x00") // a path may hold a newline
		io.Copy(io.Discard, os.Stdin)          // until killed
		os.Exit(0)
	}
	code := m.Run()
	if !testenv.ReRun() && os.Getenv(helperVar) == "" {
		os.RemoveAll(root)
	}
	os.Exit(code)
}

// asNobodyToo runs the test body as the current user and, as root, again
// as nobody.
func asNobodyToo(t *testing.T) {
	t.Helper()
	if os.Geteuid() == 0 && !testenv.ReRun() {
		t.Cleanup(func() {
			if !t.Failed() {
				testenv.RunAsUser(t, testenv.NobodyUID, testenv.NobodyGID)
			}
		})
	}
}

// ownMarkers gives the test a marker root of its own.
func ownMarkers(t *testing.T) {
	t.Helper()
	root, err := os.MkdirTemp("/dev/shm", "moat-workdir-test-")
	must(t, err)
	old := markerRoot
	markerRoot = root
	t.Cleanup(func() { markerRoot = old; os.RemoveAll(root) })
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// hostDir makes a directory outside the workdir a hostile tool would aim
// at: mode 0500 with a 0700 directory and a 0600 file in it.
func hostDir(t *testing.T, root string) string {
	h := filepath.Join(root, "host")
	must(t, os.MkdirAll(filepath.Join(h, "inner"), 0o700))
	must(t, os.WriteFile(filepath.Join(h, "secret"), []byte("s"), 0o600))
	must(t, os.Chmod(h, 0o500))
	t.Cleanup(func() { os.Chmod(h, 0o700) })
	return h
}

func modeOf(t *testing.T, p string) os.FileMode {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatalf("%s: %v", p, err)
	}
	return fi.Mode()
}

// TestRemoveAllNeverFollowsLinks: a tree a hostile tool left, with links
// to a host directory at the top and inside directories it made 0500 and
// 0000, is removed whole, and the host directory keeps its mode and
// entries (a chmod or an unlink through a link would change them).
func TestRemoveAllNeverFollowsLinks(t *testing.T) {
	asNobodyToo(t)
	root := t.TempDir()
	host := hostDir(t, root)
	wd := filepath.Join(root, "wd")
	must(t, os.MkdirAll(filepath.Join(wd, "ro", "deep"), 0o700))
	must(t, os.MkdirAll(filepath.Join(wd, "none", "x"), 0o700))
	must(t, os.WriteFile(filepath.Join(wd, "ro", "deep", "f"), []byte("f"), 0o400))
	for _, l := range []string{"link", "ro/link", "ro/deep/link", "none/link", "none/x/link"} {
		must(t, os.Symlink(host, filepath.Join(wd, l)))
	}
	must(t, os.Symlink(filepath.Join(host, "secret"), filepath.Join(wd, "ro", "file-link")))
	must(t, os.Chmod(filepath.Join(wd, "ro", "deep"), 0o500))
	must(t, os.Chmod(filepath.Join(wd, "ro"), 0o500))
	must(t, os.Chmod(filepath.Join(wd, "none", "x"), 0o000))
	must(t, os.Chmod(filepath.Join(wd, "none"), 0o000))
	must(t, os.Chmod(wd, 0o500))

	if err := RemoveAll(wd); err != nil {
		t.Fatalf("RemoveAll: %v", err)
	}
	if _, err := os.Lstat(wd); !os.IsNotExist(err) {
		t.Fatalf("the workdir survived: %v", err)
	}
	if m := modeOf(t, host); m.Perm() != 0o500 {
		t.Errorf("the host directory's mode changed to %v", m)
	}
	if m := modeOf(t, filepath.Join(host, "secret")); m.Perm() != 0o600 {
		t.Errorf("the host file's mode changed to %v", m)
	}
	if m := modeOf(t, filepath.Join(host, "inner")); m.Perm() != 0o700 || !m.IsDir() {
		t.Errorf("the host directory's subdirectory is now %v", m)
	}
	if err := RemoveAll(wd); err != nil {
		t.Fatalf("RemoveAll of a missing path: %v", err)
	}
}

// startKilledOwner creates a workdir with a marker in a helper process and
// SIGKILLs it, as an outer executor kills `moat run`.
func startKilledOwner(t *testing.T, base string, env ...string) string {
	t.Helper()
	self, err := os.Executable()
	must(t, err)
	cmd := exec.Command(self, "-test.run=^$")
	cmd.Env = append(append(os.Environ(), helperVar+"="+base), env...)
	stdin, err := cmd.StdinPipe()
	must(t, err)
	out, err := cmd.StdoutPipe()
	must(t, err)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	must(t, cmd.Start())
	b, err := bufio.NewReader(out).ReadString(0)
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("helper: %q %v %s", b, err, errb.String())
	}
	cmd.Process.Kill()
	cmd.Wait()
	stdin.Close()
	return strings.TrimSuffix(b, "\x00")
}

// TestSweepRemovesOnlyWhatDeadRunsLeft: the workdir of a SIGKILLed owner
// is swept; a live owner's (this process's) is not; a base that holds
// nothing of a dead run is left as it was, and no marker stays.
func TestSweepRemovesOnlyWhatDeadRunsLeft(t *testing.T) {
	asNobodyToo(t)
	base := t.TempDir()
	log := slog.New(slog.DiscardHandler)
	live, err := Create(base, "moat-run-", log)
	must(t, err)
	dead := startKilledOwner(t, base)
	must(t, os.Chmod(dead, 0o500)) // as a tool might have left it
	if _, err := os.Stat(dead); err != nil {
		t.Fatalf("the killed owner's workdir: %v", err)
	}
	if n := Sweep(log); n != 1 {
		t.Fatalf("Sweep removed %d workdirs, want 1", n)
	}
	if _, err := os.Lstat(dead); !os.IsNotExist(err) {
		t.Fatalf("the killed owner's workdir survived the sweep: %v", err)
	}
	if _, err := os.Stat(live.Path); err != nil {
		t.Fatalf("the sweep removed a live owner's workdir: %v", err)
	}
	if n := Sweep(log); n != 0 {
		t.Fatalf("a second Sweep removed %d", n)
	}
	live.Remove(log)
	for _, dir := range []string{base, markerDir()} {
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			t.Errorf("left in %s: %s", dir, e.Name())
		}
	}
}

// TestSweepTouchesOnlyItsUsersMarkers: as root, the sweep does not read
// another user's marker directory, even one with a dead run's marker.
func TestSweepTouchesOnlyItsUsersMarkers(t *testing.T) {
	testenv.RequireRoot(t)
	ownMarkers(t)
	base := t.TempDir()
	other := filepath.Join(markerRoot, "moat-workdirs-12345")
	must(t, os.Mkdir(other, 0o700))
	defer os.RemoveAll(other)
	victim := filepath.Join(base, "moat-run-victim")
	must(t, os.WriteFile(filepath.Join(other, "w-victim"), []byte(victim), 0o600))
	must(t, os.Mkdir(victim, 0o700))
	must(t, os.Chown(other, 12345, 12345))
	if n := Sweep(slog.New(slog.DiscardHandler)); n != 0 {
		t.Fatalf("root's sweep removed %d workdirs of nobody's", n)
	}
	if _, err := os.Stat(filepath.Join(base, "moat-run-victim")); err != nil {
		t.Fatalf("root's sweep removed nobody's workdir: %v", err)
	}
}

// TestCreateRefusesAForeignMarkerDirectory: a marker directory another
// user planted (or a symlink in its place) is not used; the workdir is
// still made, without a marker, and the failure is logged.
func TestCreateRefusesAForeignMarkerDirectory(t *testing.T) {
	ownMarkers(t)
	base := t.TempDir()
	target := t.TempDir()
	must(t, os.Symlink(target, markerDir()))
	defer os.Remove(markerDir())
	var logb bytes.Buffer
	d, err := Create(base, "moat-run-", slog.New(slog.NewTextHandler(&logb, nil)))
	must(t, err)
	defer d.Remove(slog.New(slog.DiscardHandler))
	if !strings.Contains(logb.String(), "no marker") {
		t.Fatalf("no warning logged: %q", logb.String())
	}
	if ents, _ := os.ReadDir(target); len(ents) != 0 {
		t.Fatalf("a marker was made through the planted symlink: %v", ents)
	}
}

func BenchmarkSweepNothingLeft(b *testing.B) {
	log := slog.New(slog.DiscardHandler)
	for b.Loop() {
		Sweep(log)
	}
}

// The benchmarks make their workdirs on a tmpfs: on a disk the directory
// itself costs far more than its marker, and varies with the disk's load.

func BenchmarkCreateRemove(b *testing.B) {
	base := shmBase(b)
	log := slog.New(slog.DiscardHandler)
	for b.Loop() {
		d, err := Create(base, "moat-run-", log)
		if err != nil {
			b.Fatal(err)
		}
		d.Remove(log)
	}
}

// BenchmarkMkdirTempRemoveAll is what Create and Remove replace.
func BenchmarkMkdirTempRemoveAll(b *testing.B) {
	base := shmBase(b)
	for b.Loop() {
		p, err := os.MkdirTemp(base, "moat-run-")
		if err != nil {
			b.Fatal(err)
		}
		os.RemoveAll(p)
	}
}

func shmBase(b *testing.B) string {
	base, err := os.MkdirTemp("/dev/shm", "moat-workdir-bench-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(base) })
	return base
}

// TestCreateRefusesANameThatLeavesTheBase: a prefix (a tool's name) with a
// '/' or a NUL byte makes nothing, in the base or outside it; one with
// dots or a newline stays a direct child of the base.
func TestCreateRefusesANameThatLeavesTheBase(t *testing.T) {
	root := t.TempDir()
	base := filepath.Join(root, "a", "b")
	must(t, os.MkdirAll(base, 0o700))
	// What an earlier tool named ".." could have left: with it, the name
	// "rulvar-exec-../../../x-" resolves to root/a/x-XXXXXX.
	must(t, os.Mkdir(filepath.Join(base, "rulvar-exec-.."), 0o700))
	log := slog.New(slog.DiscardHandler)
	for _, prefix := range []string{"rulvar-exec-../../../x-", "rulvar-exec-../x-", "rulvar-exec-x\x00y-"} {
		if d, err := Create(base, prefix, log); err == nil {
			d.Remove(log)
			t.Errorf("Create(%q) made %s", prefix, d.Path)
		}
	}
	for _, dir := range []string{root, filepath.Join(root, "a"), base} {
		ents, _ := os.ReadDir(dir)
		if len(ents) != 1 {
			t.Errorf("%s holds %v after the refused names", dir, ents)
		}
	}
	for _, prefix := range []string{"rulvar-exec-..-", "rulvar-exec-my.tool-", "rulvar-exec-x\ny-"} {
		d, err := Create(base, prefix, log)
		must(t, err)
		if filepath.Dir(d.Path) != base || !strings.HasPrefix(filepath.Base(d.Path), prefix) {
			t.Errorf("Create(%q) made %s, not a child of %s", prefix, d.Path, base)
		}
		d.Remove(log)
	}
}

// TestSweepOfANameWithANewline: a killed owner whose workdir's name holds
// a newline (a tool named "x\n/y") has exactly that workdir swept; the
// directory named by the part before the newline, which a marker cut at
// the newline would name, is left alone.
func TestSweepOfANameWithANewline(t *testing.T) {
	asNobodyToo(t)
	base := t.TempDir()
	decoy := filepath.Join(base, "rulvar-exec-x")
	must(t, os.Mkdir(decoy, 0o700))
	dead := startKilledOwner(t, base, prefixVar+"=rulvar-exec-x\n-")
	if filepath.Dir(dead) != base || !strings.Contains(dead, "\n") {
		t.Fatalf("the killed owner's workdir is %q", dead)
	}
	if n := Sweep(slog.New(slog.DiscardHandler)); n != 1 {
		t.Fatalf("Sweep removed %d workdirs, want 1", n)
	}
	if _, err := os.Lstat(dead); !os.IsNotExist(err) {
		t.Fatalf("the killed owner's workdir survived the sweep: %v", err)
	}
	if _, err := os.Stat(decoy); err != nil {
		t.Fatalf("the sweep removed %s, which no run made: %v", decoy, err)
	}
}

// TestSweepReadsAnOlderMarker: a marker in the format of a moat from
// before NUL ended its path (path, newline, id) is still swept.
func TestSweepReadsAnOlderMarker(t *testing.T) {
	ownMarkers(t)
	base := t.TempDir()
	wd := filepath.Join(base, "rulvar-exec-old-AbC123")
	must(t, os.Mkdir(wd, 0o700))
	var st unix.Stat_t
	must(t, unix.Stat(wd, &st))
	must(t, os.Mkdir(markerDir(), 0o700))
	must(t, os.WriteFile(filepath.Join(markerDir(), "w-old"), []byte(wd+"\n"+fileID(&st)), 0o600))
	if n := Sweep(slog.New(slog.DiscardHandler)); n != 1 {
		t.Fatalf("Sweep removed %d workdirs, want 1", n)
	}
	if _, err := os.Lstat(wd); !os.IsNotExist(err) {
		t.Fatalf("the older marker's workdir survived: %v", err)
	}
}
