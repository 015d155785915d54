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
)

// helperVar makes the test binary a helper that creates a workdir in the
// base it names, prints its path and waits to be killed.
const helperVar = "MOAT_WORKDIR_HELPER"

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
		d, err := Create(base, "moat-run-", slog.New(slog.DiscardHandler))
		if err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(1)
		}
		os.WriteFile(filepath.Join(d.Path, "left"), []byte("x"), 0o600)
		os.Stdout.WriteString(d.Path + "\n")
		io.Copy(io.Discard, os.Stdin) // until killed
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
func startKilledOwner(t *testing.T, base string) string {
	t.Helper()
	self, err := os.Executable()
	must(t, err)
	cmd := exec.Command(self, "-test.run=^$")
	cmd.Env = append(os.Environ(), helperVar+"="+base)
	stdin, err := cmd.StdinPipe()
	must(t, err)
	out, err := cmd.StdoutPipe()
	must(t, err)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	must(t, cmd.Start())
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("helper: %v %s", err, errb.String())
	}
	cmd.Process.Kill()
	cmd.Wait()
	stdin.Close()
	return strings.TrimSpace(line)
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
