package nsexec

import (
	"encoding/binary"
	"fmt"
	"os"
	"sync"
	"syscall"
	"unsafe"

	"github.com/moat-sandbox/moat/seccomp"
	"golang.org/x/sys/unix"
)

// The init's tail (issue 19). When the launcher's build links it (cgo:
// tail.c) and its binary is static, a prepared sandbox's Go init
// does the setup and then execs that binary into a small C program that
// stays pid 1: it loads the policy's filter, waits for the request under
// it, starts the tool, forwards signals from a signalfd, reaps and reports,
// with one thread and no Go runtime. That takes the Go init's share out of
// every warm dispatch (the filter's TSYNC over every runtime thread, a fork
// from a multi-threaded process, an exit that stops every thread first) and
// most of a waiting sandbox's memory. A cold sandbox (Start) keeps its Go init:
// there the tail's exec, a libc start included, cost more than it saved
// when cold starts used it (7.6 against 7.2 ms a dispatch, measured once).
//
// The handover: the Go side drops every capability and sets no_new_privs
// on the exec thread (execve keeps exactly that thread's credentials),
// marks every descriptor close-on-exec but the sync socket and the filter's
// memfd, blocks every signal on that thread (execve keeps the mask, so the
// tail starts with all of them queued and none lost), and execs the
// launcher's binary through the descriptor the launcher passed, with one
// environment variable that names the tail and its descriptors. The
// constructor that recognises it runs before the Go runtime would, and
// never returns to it. Without cgo (haveTail false), from a dynamic
// launcher, or when the sandbox has an egress forwarder (a goroutine of the
// Go init), the Go init stays pid 1 to the end, as pid1_linux.go describes;
// .ci/test runs the suites both ways.
//
// The Go init does not subscribe to signals when a tail follows: one sent
// before the sandbox is ready (Prepare has not returned) is the Go
// runtime's, which ends the init on SIGTERM and the like and drops the
// rest. From the ready on, every signal waits in the tail's queue until the
// tool runs (TestSignalQueuedBeforeTheTool).

// tailBinary opens the launcher's own binary for a sandbox's tail, or
// returns nil: the build must link the tail (cgo), the binary must be
// static (a dynamic one would be loaded by the sandbox's ld.so and
// libraries, code of the new root, a caller's rootfs, running in pid 1
// before the filter), and the sandbox must have no egress forwarder (a
// goroutine of the Go init). The init itself may be another binary
// (WithInitPath: cmd/moat-init, built without cgo so that its own start
// pays no libc initialisation); the tail is this one.
func tailBinary(c *Config, deferred bool, id Identity) *os.File {
	if !haveTail || !deferred || c.Egress != nil {
		return nil
	}
	f, err := os.OpenFile("/proc/self/exe", os.O_RDONLY, 0)
	if err != nil {
		return nil
	}
	staticOnce.Do(func() { static = staticELF(int(f.Fd())) })
	var st unix.Stat_t
	if !static || unix.Fstat(int(f.Fd()), &st) != nil || !executableBy(&st, id) {
		f.Close()
		return nil
	}
	return f
}

// executableBy reports whether the sandbox's host identity may exec the
// file st describes: the tail's exec runs after the identity switch, and a
// root launcher's binary of mode 0700 is not the sandbox's to run (the Go
// init, exec'd before the switch, then stays pid 1).
func executableBy(st *unix.Stat_t, id Identity) bool {
	switch {
	case st.Uid == id.UID:
		return st.Mode&0o100 != 0
	case st.Gid == id.GID:
		return st.Mode&0o010 != 0
	default:
		return st.Mode&0o001 != 0
	}
}

var (
	staticOnce sync.Once
	static     bool
)

// staticELF reports whether fd is a 64-bit ELF executable without a
// PT_INTERP program header, one the kernel runs without a dynamic loader.
func staticELF(fd int) bool {
	var h [64]byte
	if n, err := unix.Pread(fd, h[:], 0); err != nil || n != len(h) ||
		string(h[:4]) != "\x7fELF" || h[4] != 2 /* ELFCLASS64 */ || h[5] != 1 /* little-endian */ {
		return false
	}
	phoff := binary.LittleEndian.Uint64(h[32:])
	phentsize := int(binary.LittleEndian.Uint16(h[54:]))
	phnum := int(binary.LittleEndian.Uint16(h[56:]))
	if phentsize < 56 || phnum == 0 || phnum > 256 {
		return false
	}
	ph := make([]byte, phentsize*phnum)
	if n, err := unix.Pread(fd, ph, int64(phoff)); err != nil || n != len(ph) {
		return false
	}
	for i := 0; i < phnum; i++ {
		if binary.LittleEndian.Uint32(ph[i*phentsize:]) == 3 /* PT_INTERP */ {
			return false
		}
	}
	return true
}

// execTail is exec for a prepared sandbox's tail: the privilege drop here,
// the request, the filter and the tool there. It returns only on failure.
func (c *child) execTail() error {
	cfg := c.cfg
	if len(cfg.Seccomp) > 0 {
		if _, err := seccomp.ParseProgram(cfg.Seccomp); err != nil {
			return stepErr(StepSeccomp, "", err.Error(), unix.EINVAL)
		}
	}
	if err := c.dropPrivileges(); err != nil {
		return err
	}
	if err := unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err != nil {
		return stepErr(StepFDs, "", "close_range", err)
	}
	mfd := 0
	if len(cfg.Seccomp) > 0 {
		fd, err := unix.MemfdCreate("moat-filter", 0) // inherited by the tail
		if err != nil {
			return stepErr(StepSeccomp, "", "memfd for the filter", err)
		}
		if _, err := unix.Pwrite(fd, cfg.Seccomp, 0); err != nil {
			return stepErr(StepSeccomp, "", "write the filter", err)
		}
		mfd = fd
	}
	if _, err := unix.FcntlInt(uintptr(c.sync), unix.F_SETFD, 0); err != nil {
		return stepErr(StepFDs, "", "sync socket", err)
	}
	tty := 0
	if cfg.Terminal {
		tty = 1
	}
	env := []string{fmt.Sprintf("_MOAT_TAIL=%d,%d,%d,%d", c.sync, mfd, len(cfg.Seccomp), tty)}
	// The Landlock domain, on this thread, which the tail's exec keeps;
	// the tail loads the filter after it (landlock_linux.go).
	if err := c.restrictLandlock(c.self); err != nil {
		return err
	}
	// The descriptor limit the Go runtime raised at start goes back to
	// what the init started with, as syscall.ForkExec does for a tool
	// (errors ignored there too: a lower hard limit from the policy wins).
	if lim, ok := tailOrigNofile(); ok {
		_ = unix.Prlimit(0, unix.RLIMIT_NOFILE, &lim, nil)
	}
	// Every signal blocked on this thread, the one that execs: the tail
	// inherits the mask and reads what arrives from its signalfd.
	all := ^uint64(0)
	unix.RawSyscall6(unix.SYS_RT_SIGPROCMASK, unix.SIG_SETMASK, uintptr(unsafe.Pointer(&all)), 0, 8, 0, 0)
	// execveat of the binary the launcher passed (AT_EMPTY_PATH): it needs
	// no path in the new root, not even /proc.
	err := execveat(c.self, []string{InitArgv0}, env)
	none := uint64(0)
	unix.RawSyscall6(unix.SYS_RT_SIGPROCMASK, unix.SIG_SETMASK, uintptr(unsafe.Pointer(&none)), 0, 8, 0, 0)
	return stepErr(StepExec, "", "exec the init's tail", err)
}

// execveat is execveat(2) with an empty path and AT_EMPTY_PATH: it execs the
// file fd refers to. The strings are built before the call; the exec thread
// is locked, and on success nothing of this image runs again.
func execveat(fd int, argv, env []string) error {
	empty, err := syscall.BytePtrFromString("")
	if err != nil {
		return err
	}
	argvp, err := syscall.SlicePtrFromStrings(argv)
	if err != nil {
		return err
	}
	envp, err := syscall.SlicePtrFromStrings(env)
	if err != nil {
		return err
	}
	_, _, errno := syscall.RawSyscall6(unix.SYS_EXECVEAT, uintptr(fd), uintptr(unsafe.Pointer(empty)),
		uintptr(unsafe.Pointer(&argvp[0])), uintptr(unsafe.Pointer(&envp[0])), unix.AT_EMPTY_PATH, 0)
	return errno
}
