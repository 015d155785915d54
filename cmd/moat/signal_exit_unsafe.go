package main

import (
	"os"
	"runtime"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A status below zero, signalStatus(N), says that signal N ended the
// command: `moat run` then ends by that signal itself (exit), as sudo does
// when its command is killed (sudo's exec.c, terminate_command and the
// kill(getpid(), WTERMSIG) at its end), so that whoever started moat run
// sees what it would have seen of the command alone: a shell still shows
// 128+N, and an executor that reads the wait status (the reference's
// subprocess executor records signal SIGKILL and exitCode null) sees the
// signal, not an exit code of 137.
func signalStatus(sig syscall.Signal) int { return -int(sig) }

// exit ends the process with status, or by the signal a negative status
// names.
func exit(status int) {
	if status < 0 {
		dieOfSignal(syscall.Signal(-status))
	}
	os.Exit(status)
}

// kernelSigaction is struct sigaction as rt_sigaction(2) takes it on Linux
// (x86-64 and arm64 alike: handler, flags, restorer, mask).
type kernelSigaction struct {
	handler  uintptr
	flags    uint64
	restorer uintptr
	mask     uint64
}

// dieOfSignal ends the process by sig. Core dumps are off first, as sudo
// turns them off: the command's SIGSEGV or SIGABRT must not leave a core of
// moat (RLIMIT_CORE 0, and non-dumpable, which a core_pattern pipe also
// honours; core(5)). The Go runtime handles most signals itself (a SIGSEGV
// sent by kill would print a goroutine dump and exit 2), so the signal's
// action is set to SIG_DFL with the raw rt_sigaction(2), the signal
// unblocked on this thread, and sent to it with tgkill(2). A signal whose
// default action does not end a process (SIGCHLD, SIGSTOP, ...) cannot have
// ended a command; for one, and should the process still live, it exits
// 128+N.
func dieOfSignal(sig syscall.Signal) {
	switch sig {
	case unix.SIGCHLD, unix.SIGCONT, unix.SIGURG, unix.SIGWINCH, // ignored by default
		unix.SIGSTOP, unix.SIGTSTP, unix.SIGTTIN, unix.SIGTTOU: // stop, not end
		os.Exit(128 + int(sig))
	}
	_ = unix.Setrlimit(unix.RLIMIT_CORE, &unix.Rlimit{})
	_ = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	runtime.LockOSThread()
	if sig != unix.SIGKILL {
		dfl := kernelSigaction{} // SIG_DFL, no flags, empty mask
		_, _, _ = unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(sig), uintptr(unsafe.Pointer(&dfl)), 0, unsafe.Sizeof(dfl.mask), 0, 0)
	}
	set := uint64(1) << (uint(sig) - 1)
	_, _, _ = unix.RawSyscall6(unix.SYS_RT_SIGPROCMASK, unix.SIG_UNBLOCK, uintptr(unsafe.Pointer(&set)), 0, unsafe.Sizeof(set), 0, 0)
	_ = unix.Tgkill(unix.Getpid(), unix.Gettid(), sig)
	// Delivered on the return from tgkill for a signal that terminates; a
	// moment more for the kernel to tear the process down.
	time.Sleep(100 * time.Millisecond)
	os.Exit(128 + int(sig))
}
