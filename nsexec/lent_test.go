//go:build linux

package nsexec

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/conformance/testenv"
	"golang.org/x/sys/unix"
)

// lendVar tells the "lend-workdir" helper its lock directory, first host
// id and workdir ("dir:first:workdir").
const lendVar = "MOAT_NSEXEC_LEND"

func init() {
	helpers["lend-workdir"] = helperLendWorkdir
}

// helperLendWorkdir starts a sandbox in the workdir, which is lent to its
// host id, says "lent" and waits to be killed.
func helperLendWorkdir() error {
	parts := strings.SplitN(os.Getenv(lendVar), ":", 3)
	first, err := strconv.ParseUint(parts[1], 10, 32)
	if err != nil {
		return err
	}
	p, err := Start(context.Background(), &Config{Args: []string{"/bin/sleep", "60"}, Workdir: parts[2]}, Stdio{},
		WithHostIDRange(parts[0], uint32(first), 1))
	if err != nil {
		return err
	}
	fmt.Println("lent")
	p.Wait()
	return nil
}

// lendAndDie lends w in a helper process and SIGKILLs the helper, as an
// outer executor kills `moat run`: w stays lent to the host id.
func lendAndDie(t *testing.T, lockDir string, first uint32, w string) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), helperVar+"=lend-workdir", fmt.Sprintf("%s=%s:%d:%s", lendVar, lockDir, first, w))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	cmd.Process.Kill()
	cmd.Wait()
	if line != "lent\n" {
		t.Fatalf("the lender said %q (%v)", line, err)
	}
	var st unix.Stat_t
	if err := unix.Stat(w, &st); err != nil || st.Uid != first {
		t.Fatalf("the killed lender's workdir is owned by %d (%v), want the host id %d", st.Uid, err, first)
	}
}

// TestLentWorkdirGivenBackAfterAKill: a root lender SIGKILLed while its
// sandbox runs leaves the caller's workdir chowned to the sandbox's host
// id. SweepLent gives it back with its owner and mode; so does the next
// lend of the same directory without a sweep; and a record whose path was
// replaced by a symlink is dropped without touching the link's target.
func TestLentWorkdirGivenBackAfterAKill(t *testing.T) {
	testenv.RequireRoot(t)
	lockDir := filepath.Join(t.TempDir(), "ids")
	const first = HostIDFirst + HostIDCount + 29 // outside the live range
	log := slog.New(slog.DiscardHandler)
	fresh := func(t *testing.T) (string, ownerMode) {
		w := filepath.Join(t.TempDir(), "work")
		if err := os.Mkdir(w, 0o710); err != nil {
			t.Fatal(err)
		}
		os.Chown(w, 0, 4242)
		return w, statOf(t, w)
	}
	records := func(t *testing.T) []os.DirEntry {
		ents, err := os.ReadDir(lentDirOf(lockDir))
		if err != nil {
			t.Fatal(err)
		}
		return ents
	}

	t.Run("sweep", func(t *testing.T) {
		w, before := fresh(t)
		lendAndDie(t, lockDir, first, w)
		SweepLent(log, WithHostIDRange(lockDir, first, 1))
		if after := statOf(t, w); after != before {
			t.Fatalf("after the sweep the workdir is %+v, want %+v", after, before)
		}
		if r := records(t); len(r) != 0 {
			t.Fatalf("records left: %v", r)
		}
	})
	t.Run("next lend", func(t *testing.T) {
		w, before := fresh(t)
		lendAndDie(t, lockDir, first, w)
		r := mustRun(t, &Config{Args: []string{"/bin/true"}, Workdir: w}, WithHostIDRange(lockDir, first, 1))
		if r.exit.Code != 0 {
			t.Fatalf("the next run: %+v", r.exit)
		}
		if after := statOf(t, w); after != before {
			t.Fatalf("after the next run the workdir is %+v, want %+v", after, before)
		}
		if r := records(t); len(r) != 0 {
			t.Fatalf("records left: %v", r)
		}
	})
	t.Run("replaced by a symlink", func(t *testing.T) {
		w, _ := fresh(t)
		lendAndDie(t, lockDir, first, w)
		target, targetBefore := fresh(t)
		os.Chown(target, first, first) // as if lent: what a sweep through the link would take back
		targetBefore = statOf(t, target)
		if err := os.Rename(w, w+".moved"); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, w); err != nil {
			t.Fatal(err)
		}
		SweepLent(log, WithHostIDRange(lockDir, first, 1))
		if after := statOf(t, target); after != targetBefore {
			t.Fatalf("the sweep changed the symlink's target: %+v, was %+v", after, targetBefore)
		}
		if r := records(t); len(r) != 0 {
			t.Fatalf("records left: %v", r)
		}
	})
}

// BenchmarkSweepLent is SweepLent's cost on a root provider's start when
// nothing is left to give back (an empty record directory).
func BenchmarkSweepLent(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("root only")
	}
	lockDir := filepath.Join(b.TempDir(), "ids")
	if err := os.MkdirAll(lentDirOf(lockDir), 0o700); err != nil {
		b.Fatal(err)
	}
	os.Chmod(lockDir, 0o700)
	log := slog.New(slog.DiscardHandler)
	for b.Loop() {
		SweepLent(log, WithHostIDRange(lockDir, HostIDFirst, 1))
	}
}

// TestLendingRacesASweep: every root moat that starts sweeps the record
// directory, and takes an unlocked dot file for a dead lender's. A lender
// between its create and its flock must then start again, not fail: the
// soak saw one dispatch in 10,000 fail with ENOENT here (issue 22).
func TestLendingRacesASweep(t *testing.T) {
	testenv.RequireRoot(t)
	lockDir := filepath.Join(t.TempDir(), "ids")
	const first = HostIDFirst + HostIDCount + 31 // outside the live range
	log := slog.New(slog.DiscardHandler)
	w := filepath.Join(t.TempDir(), "work")
	if err := os.Mkdir(w, 0o700); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	swept := make(chan int)
	go func() {
		n := 0
		for {
			select {
			case <-done:
				swept <- n
				return
			default:
				SweepLent(log, WithHostIDRange(lockDir, first, 1))
				n++
			}
		}
	}()
	var failed error
	lends := 0
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline) && failed == nil; lends++ {
		l, err := lendWorkdir(w, Identity{UID: first, GID: first}, true, lentDirOf(lockDir), log)
		if err != nil {
			failed = err
			break
		}
		l.end(log)
	}
	close(done)
	n := <-swept
	if failed != nil {
		t.Fatalf("lend %d, racing %d sweeps: %v", lends, n, failed)
	}
	t.Logf("%d lends raced %d sweeps", lends, n)

	// A dead lender's unnamed record still goes, once it is old.
	dead, young := filepath.Join(lentDirOf(lockDir), ".new-dead"), filepath.Join(lentDirOf(lockDir), ".new-young")
	for _, p := range []string{dead, young} {
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-2 * dotFileAge)
	if err := os.Chtimes(dead, old, old); err != nil {
		t.Fatal(err)
	}
	SweepLent(log, WithHostIDRange(lockDir, first, 1))
	if _, err := os.Stat(dead); err == nil {
		t.Error("an old unnamed record survived the sweep")
	}
	if _, err := os.Stat(young); err != nil {
		t.Errorf("a young unnamed record was swept: %v", err)
	}
}
