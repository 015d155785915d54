package resolve

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"
)

// TestOpenat2RidesOutMountRaces walks a RESOLVE_IN_ROOT path through ".."
// while another thread mounts and unmounts a tmpfs without pause (in a
// mount namespace of its own, so the host sees nothing). The raw call must
// be seen to fail with EAGAIN, or the race was not made and the test
// proves nothing; Openat2 must never fail.
func TestOpenat2RidesOutMountRaces(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("MOAT_REQUIRE_ALL") == "1" {
			t.Fatal("needs root to mount a tmpfs in a mount namespace of its own (MOAT_REQUIRE_ALL=1)")
		}
		t.Skip("needs root to mount a tmpfs in a mount namespace of its own")
	}
	root := t.TempDir()
	for _, d := range []string{"a/b", "c", "mnt"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	rootfd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(rootfd)

	var stop atomic.Bool
	mounted := make(chan error, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		// The thread ends with the goroutine (never unlocked), and its
		// private mount namespace with it.
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
			mounted <- err
			return
		}
		if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
			mounted <- err
			return
		}
		mounted <- nil
		target := filepath.Join(root, "mnt")
		for !stop.Load() {
			if err := unix.Mount("tmpfs", target, "tmpfs", 0, "size=4k"); err != nil {
				return
			}
			unix.Unmount(target, unix.MNT_DETACH)
		}
	}()
	if err := <-mounted; err != nil {
		t.Fatalf("a mount namespace for the racing thread: %v", err)
	}
	defer func() { stop.Store(true); <-done }()

	how := &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS}
	const path = "a/b/../../c/../a/b/../../c"
	raw, wrapped := 0, 0
	for i := 0; i < 20000; i++ {
		fd, err := unix.Openat2(rootfd, path, how)
		if err == nil {
			unix.Close(fd)
		} else if errors.Is(err, unix.EAGAIN) {
			raw++
		} else {
			t.Fatalf("raw openat2: %v", err)
		}
		fd, err = Openat2(rootfd, path, how)
		if err != nil {
			wrapped++
			t.Errorf("Openat2 failed beside a mounting thread: %v", err)
			continue
		}
		unix.Close(fd)
	}
	t.Logf("raw openat2 failed %d times in 20000 beside a mounting thread, Openat2 %d", raw, wrapped)
	if raw == 0 {
		t.Fatal("the raw call never failed with EAGAIN: the race this test needs was not made")
	}
}
