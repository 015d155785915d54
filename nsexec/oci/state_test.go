package oci

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/nsexec/hostpath"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

func TestValidID(t *testing.T) {
	for _, ok := range []string{"a", "de037b781f1f26cc", "my-ctr_1.2+x"} {
		if err := ValidID(ok); err != nil {
			t.Errorf("ValidID(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"", ".", "..", "../x", "a/b", "-rf", ".hidden", "a b", "x\x00", string(make([]byte, 300))} {
		var ie *IDError
		if err := ValidID(bad); !errors.As(err, &ie) {
			t.Errorf("ValidID(%q) = %v, want an IDError", bad, err)
		}
	}
}

// TestOpenRootHostile: a state root reached through a symlink someone else
// could have planted (issue 28 item 7), or that another user or the group
// could write, is refused, and nothing is made where a refused link
// points; the caller's own link in its own directory is followed.
func TestOpenRootHostile(t *testing.T) {
	base := t.TempDir()
	real := filepath.Join(base, "real")
	if err := os.Mkdir(real, 0o700); err != nil {
		t.Fatal(err)
	}
	planted := filepath.Join(base, "planted")
	if err := os.Mkdir(planted, 0o777); err != nil {
		t.Fatal(err)
	}
	os.Chmod(planted, 0o777) // anyone may have put the link there
	link := filepath.Join(planted, "link")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		os.Lchown(link, 65534, 65534)
	}
	for _, p := range []string{link, filepath.Join(link, "new", "root")} {
		var le *hostpath.LinkError
		if _, err := OpenRoot(p); !errors.As(err, &le) || le.Link != link {
			t.Errorf("OpenRoot(%s) through a planted link: %v, want a *hostpath.LinkError naming %s", p, err, link)
		}
	}
	if ents, _ := os.ReadDir(real); len(ents) != 0 {
		t.Errorf("a state directory was made through a planted link: %v", ents)
	}
	mine := filepath.Join(base, "mine")
	os.Symlink(real, mine)
	if r, err := OpenRoot(mine); err != nil || r.Path() != real {
		t.Errorf("through the caller's own link: %v, %v", r, err)
	} else {
		r.Close()
	}
	open := filepath.Join(base, "open")
	if err := os.Mkdir(open, 0o700); err != nil {
		t.Fatal(err)
	}
	os.Chmod(open, 0o777)
	if _, err := OpenRoot(open); err == nil {
		t.Error("a world-writable state root was accepted")
	}
	if os.Geteuid() == 0 {
		other := filepath.Join(base, "other")
		os.Mkdir(other, 0o700)
		os.Chown(other, 65534, 65534)
		if _, err := OpenRoot(other); err == nil {
			t.Error("another user's state root was accepted")
		}
	}
	r, err := OpenRoot(filepath.Join(base, "new", "root"))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	st, err := os.Stat(r.Path())
	if err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("new root: %v, mode %v", err, st.Mode())
	}
}

// TestContainerDir: create once (a second create of the ID fails), state
// written and read back, a symlink or FIFO planted in place of the
// directory or the state file refused without blocking.
func TestContainerDir(t *testing.T) {
	r, err := OpenRoot(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	d, err := r.Create("c1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Create("c1"); !errors.Is(err, ErrExist) {
		t.Fatalf("second create: %v, want ErrExist", err)
	}
	if _, err := d.ReadState(); !errors.Is(err, ErrNotExist) {
		t.Fatalf("state before it was written: %v", err)
	}
	want := &State{State: specs.State{ID: "c1", Status: specs.StateCreated, Pid: 42, Bundle: "/b"}, PidStart: 7}
	if err := d.WriteState(want); err != nil {
		t.Fatal(err)
	}
	got, err := d.ReadState()
	if err != nil || got.ID != "c1" || got.Pid != 42 || got.PidStart != 7 || got.Status != specs.StateCreated {
		t.Fatalf("read back %+v, %v", got, err)
	}
	st, _ := os.Stat(filepath.Join(r.Path(), "c1"))
	if st.Mode().Perm() != 0o700 {
		t.Fatalf("container dir mode %v", st.Mode())
	}
	// A FIFO in place of state.json must not block the reader.
	os.Remove(filepath.Join(r.Path(), "c1", "state.json"))
	if err := unix.Mkfifo(filepath.Join(r.Path(), "c1", "state.json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := d.ReadState(); err == nil {
		t.Fatal("a FIFO state file was read")
	}
	if err := d.Remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Open("c1"); !errors.Is(err, ErrNotExist) {
		t.Fatalf("after Remove: %v", err)
	}
	// A symlink planted as a container directory is not followed.
	elsewhere := t.TempDir()
	os.Symlink(elsewhere, filepath.Join(r.Path(), "c2"))
	if _, err := r.Open("c2"); err == nil {
		t.Fatal("a symlinked container directory was opened")
	}
}

func TestAlive(t *testing.T) {
	start, err := StartTime(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if !Alive(os.Getpid(), start) || Alive(os.Getpid(), start+1) || Alive(0, start) {
		t.Fatal("Alive does not tell this process from another start time")
	}
	// An exited, unreaped process is a zombie: not alive.
	c := exec.Command("/bin/true")
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	defer c.Wait()
	cs, err := StartTime(c.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	for {
		state, _, err := procStat(c.Process.Pid)
		if err != nil {
			t.Fatal(err)
		}
		if state == 'Z' {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if Alive(c.Process.Pid, cs) {
		t.Fatal("a zombie is alive")
	}
}
