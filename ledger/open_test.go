package ledger

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/conformance/testenv"
	"golang.org/x/sys/unix"
)

func wantProblem(t *testing.T, err error, p Problem) *FileError {
	t.Helper()
	var fe *FileError
	if !errors.As(err, &fe) || fe.Problem != p {
		t.Fatalf("want *FileError %v, got %T %v", p, err, err)
	}
	return fe
}

func TestOpenCreatesPrivateFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "effects.jsonl")
	l := mustOpen(t, path, WithFsync())
	mustIntent(t, l, intentFor("k", "a", 1))
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, want 0600", fi.Mode().Perm())
	}
	if got := readFile(t, path); got != intentLine(t, intentFor("k", "a", 1)) {
		t.Fatalf("file %q", got)
	}
}

func TestOpenRefusesBadPaths(t *testing.T) {
	dir := t.TempDir()
	t.Run("missing directory", func(t *testing.T) {
		_, err := Open(filepath.Join(dir, "nope", "effects.jsonl"))
		wantProblem(t, err, ProblemNoDirectory)
		if !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("want fs.ErrNotExist in the chain: %v", err)
		}
	})
	t.Run("directory", func(t *testing.T) {
		_, err := Open(dir)
		wantProblem(t, err, ProblemNotRegular)
	})
	t.Run("fifo", func(t *testing.T) {
		p := filepath.Join(dir, "fifo")
		if err := mkfifo(p); err != nil {
			t.Fatal(err)
		}
		_, err := Open(p)
		wantProblem(t, err, ProblemNotRegular)
	})
	for _, mode := range []os.FileMode{0o620, 0o602, 0o666} {
		t.Run(fmt.Sprintf("mode %#o", mode), func(t *testing.T) {
			p := writeLedger(t, intentLine(t, intentFor("k", "a", 1))+tornFrag)
			if err := os.Chmod(p, mode); err != nil {
				t.Fatal(err)
			}
			_, err := Open(p)
			wantProblem(t, err, ProblemWritableByOthers)
			if readFile(t, p) != intentLine(t, intentFor("k", "a", 1))+tornFrag {
				t.Fatal("a refused file must be untouched")
			}
		})
	}
}

func TestOpenRefusesForeignOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Skipf(t, "giving a file to another user needs root")
	}
	p := writeLedger(t, intentLine(t, intentFor("k", "a", 1)))
	if err := os.Chown(p, testenv.NobodyUID, testenv.NobodyGID); err != nil {
		t.Fatal(err)
	}
	_, err := Open(p)
	wantProblem(t, err, ProblemForeignOwner)
}

func TestOpenRefusesNonLedgerFiles(t *testing.T) {
	cases := map[string]string{
		"text":           "hello world\nsecond line\n",
		"text no eol":    "hello world",
		"json object":    `{"config":true}`,
		"pretty json":    "{\n  \"a\": 1\n}\n",
		"corrupt first":  "{malformed}\n" + intentLineNoT(),
		"row-like other": `{"phase":"other"}` + "\n",
	}
	for name, content := range cases {
		t.Run(name, func(t *testing.T) {
			p := writeLedger(t, content)
			_, err := Open(p)
			wantProblem(t, err, ProblemNotLedger)
			if readFile(t, p) != content {
				t.Fatal("a refused file must be untouched")
			}
			assertNoLock(t, p)
		})
	}
}

func intentLineNoT() string {
	b, _ := appendIntentRow(nil, &Intent{IdempotencyKey: "k", StartedAt: 1})
	return string(b)
}

func TestOpenAcceptsTornFirstRow(t *testing.T) {
	for _, frag := range []string{"{", `{"ph`, `{"phase":"intent","idem`, "\n\n" + `{"phase":"out`} {
		t.Run(frag, func(t *testing.T) {
			p := writeLedger(t, frag)
			l := mustOpen(t, p, fixedNow(9))
			mustIntent(t, l, intentFor("k", "a", 1))
			res := mustScan(t, p)
			if len(res.Torn) != 1 || len(res.Intents) != 1 {
				t.Fatalf("%+v", res)
			}
		})
	}
}

func TestOpenAsNobody(t *testing.T) {
	if testenv.RunAsUser(t, testenv.NobodyUID, testenv.NobodyGID) {
		return
	}
	path := filepath.Join(t.TempDir(), "effects.jsonl")
	if err := os.WriteFile(path, []byte(tornFrag), 0o600); err != nil {
		t.Fatal(err)
	}
	l := mustOpen(t, path, fixedNow(3))
	mustIntent(t, l, intentFor("k", "a", 1))
	res := mustScan(t, path)
	if len(res.Torn) != 1 || len(res.Intents) != 1 {
		t.Fatalf("%+v", res)
	}
}

func TestIntentRefusedOnCancelledContext(t *testing.T) {
	path := writeLedger(t, "")
	l := mustOpen(t, path)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := l.Intent(ctx, intentFor("k", "a", 1)); !errors.Is(err, context.Canceled) {
		t.Fatalf("want context.Canceled, got %v", err)
	}
	// The outcome of an effect that happened is written regardless.
	if err := l.Record(ctx, recordFor(intentFor("k", "a", 1), OutcomeError)); err != nil {
		t.Fatal(err)
	}
	res := mustScan(t, path)
	if len(res.Intents) != 0 || len(res.Outcomes) != 1 {
		t.Fatalf("%+v", res)
	}
}

func TestAppendAfterClose(t *testing.T) {
	l := mustOpen(t, writeLedger(t, ""))
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Intent(context.Background(), intentFor("k", "a", 1)); !errors.Is(err, os.ErrClosed) {
		t.Fatalf("want os.ErrClosed, got %v", err)
	}
}

func TestConcurrentAppendsNeverInterleave(t *testing.T) {
	path := writeLedger(t, "")
	l1 := mustOpen(t, path)
	l2 := mustOpen(t, path)
	const workers, each = 8, 200
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := l1
			if w%2 == 1 {
				l = l2
			}
			for i := range each {
				in := intentFor(fmt.Sprintf("k%d-%d", w, i), fmt.Sprintf("a%d-%d", w, i), Millis(i))
				in.Workdir = fmt.Sprintf("/tmp/%0300d", i) // long rows
				if err := l.Intent(context.Background(), in); err != nil {
					t.Error(err)
					return
				}
				if i%2 == 0 {
					if err := l.Record(context.Background(), recordFor(in, OutcomeOK)); err != nil {
						t.Error(err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	res := mustScan(t, path)
	if len(res.Intents) != workers*each || len(res.Outcomes) != workers*each/2 || len(res.Orphans) != workers*each/2 {
		t.Fatalf("intents %d outcomes %d orphans %d", len(res.Intents), len(res.Outcomes), len(res.Orphans))
	}
}

func TestMergePairsAcrossFiles(t *testing.T) {
	in := intentFor("k1", "a-1", 1)
	other := intentFor("k2", "a-2", 2)
	a := mustScan(t, writeLedger(t, intentLine(t, in)+intentLine(t, other)))
	b := mustScan(t, writeLedger(t, recordLine(t, recordFor(in, OutcomeOK))))
	if len(a.Orphans) != 2 {
		t.Fatalf("alone, both intents are orphans: %d", len(a.Orphans))
	}
	m := Merge(a, b)
	if ids := attemptIDs(m.Orphans); len(ids) != 1 || ids[0] != "a-2" || len(m.Files) != 2 {
		t.Fatalf("merged orphans %v files %v", ids, m.Files)
	}
	if m.Orphans[0].At.File != a.Files[0] {
		t.Fatalf("orphan location %+v", m.Orphans[0].At)
	}
}

func mkfifo(path string) error { return unix.Mkfifo(path, 0o600) }

// TestOpenRefusesSymlinkAndSpecialFiles plants what another user or a
// sandbox could leave at a ledger path: a symbolic link to an existing
// ledger (fs.protected_symlinks=0 makes this work even in a sticky /tmp), a
// dangling link, a FIFO, a directory. Each is refused with a typed error,
// nothing is written through it, and nothing blocks. As root and as nobody.
func TestOpenRefusesSymlinkAndSpecialFiles(t *testing.T) {
	_ = testenv.RunAsUser(t, testenv.NobodyUID, testenv.NobodyGID)
	dir := t.TempDir()
	victim := writeLedger(t, intentLine(t, intentFor("k", "a", 1))+tornFrag)
	before := readFile(t, victim)

	link := filepath.Join(dir, "link.jsonl")
	if err := os.Symlink(victim, link); err != nil {
		t.Fatal(err)
	}
	dangling := filepath.Join(dir, "dangling.jsonl")
	target := filepath.Join(dir, "created-through-the-link")
	if err := os.Symlink(target, dangling); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo.jsonl")
	if err := mkfifo(fifo); err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(dir, "dir.jsonl")
	if err := os.Mkdir(sub, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, path string
		want       Problem
	}{
		{"symlink to a ledger", link, ProblemSymlink},
		{"dangling symlink", dangling, ProblemSymlink},
		{"fifo", fifo, ProblemNotRegular},
		{"directory", sub, ProblemNotRegular},
	} {
		t.Run("open "+tc.name, func(t *testing.T) {
			l, err := Open(tc.path)
			if err == nil {
				// Even a wrongly accepted path must not get a row.
				l.Close()
			}
			fe := wantProblem(t, err, tc.want)
			if !strings.Contains(fe.Error(), tc.path) {
				t.Fatalf("the error does not name the path: %v", fe)
			}
		})
		t.Run("scan "+tc.name, func(t *testing.T) {
			done := make(chan error, 1)
			go func() { _, err := Scan(tc.path); done <- err }()
			select {
			case err := <-done:
				wantProblem(t, err, tc.want)
			case <-time.After(10 * time.Second):
				t.Fatalf("Scan(%s) blocked", tc.path)
			}
		})
	}
	if got := readFile(t, victim); got != before {
		t.Fatalf("the link's target was written: %q", got)
	}
	assertNoLock(t, victim)
	if _, err := os.Lstat(target); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the dangling link's target was created: %v", err)
	}
}

// TestRepairLockIsNotFollowed: a lock file replaced by a FIFO or a link is
// read without blocking and never taken for ours.
func TestRepairLockIsNotFollowed(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.repair-lock")
	if err := mkfifo(fifo); err != nil {
		t.Fatal(err)
	}
	mine := filepath.Join(dir, "mine")
	if err := os.WriteFile(mine, []byte("token"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.repair-lock")
	if err := os.Symlink(mine, link); err != nil {
		t.Fatal(err)
	}
	dfd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(dfd)
	for _, p := range []string{fifo, link} {
		lk := repairLock{dir: dfd, name: filepath.Base(p), path: p}
		done := make(chan string, 1)
		go func() { got, _ := lk.read(len("token")); done <- got }()
		select {
		case got := <-done:
			if got == "token" {
				t.Fatalf("the lock %s was read through", p)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("reading the lock %s blocked", p)
		}
		lk.release("token")
		if _, err := os.Lstat(p); err != nil {
			t.Fatalf("release removed a lock that is not ours: %v", err)
		}
	}
}

// TestOpenNamesTheFixForAReferenceLedgerWithMode0664: the reference creates
// its ledger with mode 0666 & ~umask; under umask 002 that is 0664 (the
// reference's jsonlEffectLedger, run on Node with umask 002, made exactly
// that). Open refuses it, untouched, with the command that fixes it, and
// after that command the same file opens and appends.
func TestOpenNamesTheFixForAReferenceLedgerWithMode0664(t *testing.T) {
	ref, err := os.ReadFile("testdata/reference.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"effects.jsonl", "it's effects.jsonl"} {
		path := filepath.Join(t.TempDir(), name)
		if err := os.WriteFile(path, ref, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, 0o664); err != nil {
			t.Fatal(err)
		}
		_, err := Open(path)
		wantProblem(t, err, ProblemWritableByOthers)
		fix := "chmod 600 " + shellQuote(path)
		if !strings.Contains(err.Error(), "mode 0664") || !strings.Contains(err.Error(), fix) {
			t.Fatalf("error %q does not name the mode and the fix %q", err, fix)
		}
		if readFile(t, path) != string(ref) {
			t.Fatal("a refused file must be untouched")
		}
		if _, err := Scan(path); err != nil { // reading it needs no fix
			t.Fatalf("Scan of the 0664 ledger: %v", err)
		}
		// Run the fix the error names, through a shell.
		if out, err := exec.Command("/bin/sh", "-c", fix).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v: %s", fix, err, out)
		}
		l := mustOpen(t, path)
		mustIntent(t, l, intentFor("k", "a", 1))
		if got := readFile(t, path); !strings.HasPrefix(got, string(ref)) || len(got) == len(ref) {
			t.Fatal("the fixed ledger was not appended to")
		}
	}
}
