package nsexec

import (
	"math/bits"
	"os"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The init forwards signals through a handler of its own
// (signals_linux_amd64.s) rather than os/signal. os/signal enables one
// signal at a time, each a round trip to the runtime's signal thread
// (runtime sigenable, ensureSigM): for the 59 the init forwards that cost
// 1 to 1.3 ms of CPU and about 130 context switches per sandbox, most of
// the init's cost. Installing the handler is one rt_sigaction(2) per
// signal and no wakeup, and a signal then costs the init one kill(2), with
// no trip through the runtime's signal queue and goroutines.
//
// The handler runs on whichever thread the kernel picks. Only the exec
// thread holds the tool's credentials (the identity switch is per thread),
// so only its kill(2) passes the permission check when the launcher is
// root: on any other thread the handler raises the signal again on the exec
// thread (tgkill), and there sends it to the tool, or holds it in
// fwdPending until the tool runs. A synchronous fault the kernel raised
// for the init's own code (si_code > 0) ends the init with 128+N; a
// returning handler would only fault again.
//
// The Go runtime must not send signals of its own to the init, or they
// would reach the tool: its asynchronous preemption (SIGURG) is off in the
// init (initGodebug).

var (
	// fwdHandlerPC and fwdRestorerPC are the handler's and its restorer's
	// addresses (signals_linux_amd64.s).
	fwdHandlerPC, fwdRestorerPC uintptr
	// fwdTid is the exec thread, set before the handler is installed.
	fwdTid int32
	// fwdPid is the tool once it runs, 0 before; written by the exec
	// thread only.
	fwdPid int32
	// fwdPending holds the signals that came before the tool ran, bit N-1
	// for signal N; the handler sets bits only on the exec thread.
	fwdPending uint64
)

// sigaction is the kernel's struct sigaction on amd64
// (arch/x86/include/uapi/asm/signal.h with SA_RESTORER).
type sigaction struct {
	handler  uintptr
	flags    uint64
	restorer uintptr
	mask     uint64
}

const (
	saSiginfo  = 0x4
	saRestorer = 0x04000000
	saOnstack  = 0x08000000
	saRestart  = 0x10000000
	sigIgn     = 1
)

// signals is empty here: the handler's state is the variables above, which
// the handler reads at fixed addresses.
type signals struct{}

// subscribe installs the handler for every signal the init forwards. It
// runs on the exec thread at the start of the setup, so a signal that comes
// during the setup or while a prepared sandbox waits reaches the tool once
// it runs. A signal the init inherited as ignored stays ignored, so the tool
// inherits that too, as it would outside (the Go runtime keeps an inherited
// SIG_IGN only for SIGHUP and SIGINT, os/signal.Ignored's rule).
func (c *child) subscribe() {
	fwdTid = int32(unix.Gettid())
	// Every signal is blocked while the handler runs, as the Go runtime's
	// own handler has it: a burst of different signals would otherwise nest
	// one frame per signal on the thread's 32 KiB signal stack until it
	// overflows and the kernel kills the init with SIGSEGV.
	act := sigaction{handler: fwdHandlerPC, flags: saSiginfo | saOnstack | saRestart | saRestorer,
		restorer: fwdRestorerPC, mask: ^uint64(0)}
	for _, s := range forwardable() {
		var old sigaction
		if err := rtSigaction(s, &act, &old); err != nil {
			c.fail(stepErr(StepConfig, "", "install the signal handler", err))
		}
		if old.handler == sigIgn {
			_ = rtSigaction(s, &old, nil)
		}
	}
}

// subscribed returns at once: subscribe completed synchronously.
func (c *child) subscribed() {}

// supervise lets the handler forward to the tool from now on, sends it what
// came before, and reaps on the exec thread until the tool is gone; then it
// reports the tool's status and exits. wait4(2) reaps the children of every
// thread of the init, and the tool's exit wakes it directly.
func (c *child) supervise(tool int) {
	// On the exec thread, like every handler run that touches these: a
	// signal is either sent by the handler (after the store) or taken here
	// (before it), never both, never neither.
	atomic.StoreInt32(&fwdPid, int32(tool))
	for p := atomic.SwapUint64(&fwdPending, 0); p != 0; p &= p - 1 {
		_ = unix.Kill(tool, syscall.Signal(bits.TrailingZeros64(p)+1))
	}
	go watchLauncher(c.sync)
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, 0, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			os.Exit(exitSetup) // ECHILD: the tool is gone unseen, cannot happen
		}
		if pid == tool {
			c.exit(ws)
		}
		// An orphan re-parented to the init: reaped, nothing more.
	}
}

// rtSigaction is rt_sigaction(2) with the kernel's struct.
func rtSigaction(sig syscall.Signal, act, old *sigaction) error {
	_, _, e := unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(sig),
		uintptr(unsafe.Pointer(act)), uintptr(unsafe.Pointer(old)), 8, 0, 0)
	if e != 0 {
		return e
	}
	return nil
}
