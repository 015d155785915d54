package testenv

import (
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// SoakCount reads a soak length from the test-only environment variable
// name (`make soak` sets them, and a re-run as another user inherits
// them), else def: a plain `go test` runs the short mode.
func SoakCount(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive count", name, v)
	}
	return n
}

// Resources is what a soak must leave as it found it: the descriptors and
// goroutines of this process, and the mount table it sees.
type Resources struct {
	fds        []string
	goroutines int
	mounts     []string
}

// Snapshot records this process's resources now.
func Snapshot(t testing.TB) Resources {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	var fds []string
	for _, e := range ents {
		target, _ := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		fds = append(fds, e.Name()+" -> "+target)
	}
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	return Resources{fds: fds, goroutines: runtime.NumGoroutine(), mounts: strings.Split(string(mi), "\n")}
}

// CheckLeaks fails t for every descriptor and goroutine this process holds
// beyond before, giving a teardown up to 10 s to end them, and for every
// new mount that names one of paths (the soak's own directories). The
// mount table is the host's, which other programs change meanwhile: a new
// mount naming none of paths is logged, not failed.
func CheckLeaks(t testing.TB, before Resources, paths ...string) {
	t.Helper()
	var now Resources
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		now = Snapshot(t)
		if (len(now.fds) <= len(before.fds) && now.goroutines <= before.goroutines) || time.Now().After(deadline) {
			break
		}
	}
	if len(now.fds) > len(before.fds) {
		t.Errorf("descriptors leaked: %d before, %d after:\nbefore %v\nafter  %v", len(before.fds), len(now.fds), before.fds, now.fds)
	}
	if now.goroutines > before.goroutines {
		buf := make([]byte, 1<<20)
		t.Errorf("goroutines leaked: %d before, %d after:\n%s", before.goroutines, now.goroutines, buf[:runtime.Stack(buf, true)])
	}
	for _, m := range now.mounts {
		if slices.Contains(before.mounts, m) {
			continue
		}
		if slices.ContainsFunc(paths, func(p string) bool { return strings.Contains(m, p) }) {
			t.Errorf("a mount of the soak is left: %s", m)
		} else {
			t.Logf("a mount appeared meanwhile, not the soak's: %s", m)
		}
	}
}

// Spread calls do(0) to do(n-1) over workers goroutines, each index once,
// and returns how long they took.
func Spread(n, workers int, do func(i int)) time.Duration {
	next := make(chan int)
	var wg sync.WaitGroup
	start := time.Now()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				do(i)
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	return time.Since(start)
}
