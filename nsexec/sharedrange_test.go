//go:build linux

package nsexec

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// sleeper starts a sandbox that sleeps, killed and reaped at the test's end.
func sleeper(t *testing.T, opts ...Option) *Process {
	t.Helper()
	p, err := Start(context.Background(), &Config{Args: []string{"/bin/sleep", "60"}, UID: 0, GID: 0, ExactIDs: true}, Stdio{}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Signal(syscall.SIGKILL); p.Wait() })
	return p
}

// mapOf is /proc/PID/FILE with its blanks folded.
func mapOf(t *testing.T, pid int, file string) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, file))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(strings.Fields(string(b)), " ")
}

// A sandbox started WithSharedRange, with a copy of a pod's lease, has
// exactly the pod's maps, and holds the range for as long as it runs: with
// the pod's own sandbox ended, the one-block space stays exhausted until
// the sharer ended too; then the block is free.
func TestSharedRangeHeldByEverySharer(t *testing.T) {
	rootOnly(t)
	space := rangeSpace(t, 1)
	pod := sleeper(t, space)
	lease, err := pod.ShareLease()
	if err != nil {
		t.Fatal(err)
	}
	member := sleeper(t, space, WithSharedRange(lease))
	lease.Close()
	want := fmt.Sprintf("0 %d 65536", testRangeFirst)
	for _, f := range []string{"uid_map", "gid_map"} {
		if a, b := mapOf(t, pod.Pid(), f), mapOf(t, member.Pid(), f); a != want || b != want {
			t.Errorf("%s: the pod's %q, the member's %q, want both %q", f, a, b, want)
		}
	}
	if id := member.HostIdentity(); id.UID != testRangeFirst || id.GID != testRangeFirst {
		t.Errorf("the member's root is host %+v, want the pod's %d", id, testRangeFirst)
	}
	pod.Signal(syscall.SIGKILL)
	pod.Wait()
	if _, err := Start(context.Background(), &Config{Args: []string{"/bin/true"}}, Stdio{}, space); !errors.Is(err, ErrHostRangesExhausted) {
		t.Fatalf("the pod's sandbox ended, its member runs: a new sandbox got %v, want ErrHostRangesExhausted (the range is the member's still)", err)
	}
	member.Signal(syscall.SIGKILL)
	member.Wait()
	r := mustRun(t, &Config{Args: []string{"/bin/cat", "/proc/self/uid_map"}}, space)
	if got := strings.Join(strings.Fields(r.stdout), " "); got != want {
		t.Fatalf("with every sharer gone, a new sandbox maps %q, want the freed block %q", got, want)
	}
}

// WithSharedRange takes nothing but a held lease of the range space: a
// descriptor of another file, of a file named like a block elsewhere, of a
// single host id's lock, a closed one, the lock file opened anew beside
// the pod's lease, and one of a block no sandbox holds are each refused
// with ErrNotRangeLease before anything is spawned, and none of them takes
// or frees a block.
func TestSharedRangeRefusesOtherDescriptors(t *testing.T) {
	rootOnly(t)
	base := t.TempDir()
	dir := filepath.Join(base, "ranges")
	space := WithHostRangeSpace(dir, testRangeFirst, 2)
	pod := sleeper(t, space)
	block := filepath.Join(dir, fmt.Sprint(testRangeFirst))
	other := filepath.Join(dir, fmt.Sprint(testRangeFirst+HostRangeSize))

	open := func(path string) *os.File {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f
	}
	plain := open(filepath.Join(base, "plain"))
	os.MkdirAll(filepath.Join(base, "elsewhere"), 0o700)
	lookalike := open(filepath.Join(base, "elsewhere", fmt.Sprint(testRangeFirst)))
	single := sleeper(t, WithHostIDRange(filepath.Join(base, "ids"), HostIDFirst+60000, 1))
	singleLease, err := single.ShareLease()
	if err != nil {
		t.Fatal(err)
	}
	defer singleLease.Close()
	closed, err := pod.ShareLease()
	if err != nil {
		t.Fatal(err)
	}
	closed.Close()
	anew := open(block)
	// The second block is free: its lock file exists (made here) and no
	// sandbox holds it.
	unheld := open(other)

	for name, f := range map[string]*os.File{
		"another file":             plain,
		"a block's name elsewhere": lookalike,
		"a single id's lock":       singleLease,
		"a closed descriptor":      closed,
		"the lock opened anew":     anew,
		"a block nobody holds":     unheld,
		"no descriptor":            nil,
	} {
		p, err := Start(context.Background(), &Config{Args: []string{"/bin/true"}}, Stdio{}, space, WithSharedRange(f))
		if err == nil {
			p.Wait()
			t.Errorf("%s: a sandbox was started sharing its range", name)
			continue
		}
		if !errors.Is(err, ErrNotRangeLease) {
			t.Errorf("%s: %v, want ErrNotRangeLease", name, err)
		}
		t.Logf("%s: %v", name, err)
	}
	// Nothing was taken: the free block is still free (one sandbox), and
	// the pod's is still held (a second one finds the space exhausted).
	q := sleeper(t, space)
	if got := mapOf(t, q.Pid(), "uid_map"); got != fmt.Sprintf("0 %d 65536", testRangeFirst+HostRangeSize) {
		t.Fatalf("after the refusals a new sandbox maps %q, want the second block", got)
	}
	if _, err := Start(context.Background(), &Config{Args: []string{"/bin/true"}}, Stdio{}, space); !errors.Is(err, ErrHostRangesExhausted) {
		t.Fatalf("after the refusals: %v, want the space exhausted (both blocks held)", err)
	}
}
