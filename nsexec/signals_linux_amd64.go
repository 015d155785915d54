package nsexec

import (
	"math/bits"
	"os"
	"strconv"
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
// The handler runs on whichever thread the kernel picks. Until the other
// threads drop (startDrop, below), only the exec thread holds the tool's
// credentials, so only its kill(2) passes the permission check when the
// launcher is root; and fwdPending is simplest touched by one thread. So on
// any other thread the handler raises the signal again on the exec thread
// (tgkill), and there sends it to the tool, or holds it in fwdPending until
// the tool runs. A synchronous fault the kernel raised
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

// signals holds the exec thread's side of the other threads' drop; the
// handler's own state is the variables above, at fixed addresses.
type signals struct {
	drops drops
}

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

// The identity switch and the privilege drop are per thread and were made
// on the exec thread only; the Go runtime's other threads of the init kept
// the setup's credentials (a root launcher's host uid 0, unmapped in the
// sandbox, with initCaps in its user namespace). startDrop and finishDrop
// make each of them drop the same way, from the handler: the
// init tgkills dropSig to
// every other thread, and the handler, seeing a dropSig that only the init
// itself can have sent, switches that thread's ids, clears its capability
// sets and sets no_new_privs (signals_linux_amd64.s). Neither Go's
// AllThreadsSyscall (unavailable with cgo, and a stop of the world per
// call) nor libc's set*id broadcast (ids only, not capabilities) does this.
const dropSig = 64

var (
	dropUID, dropGID, dropGroups uint32
	// dropCapHdr and dropCapData are capset(2)'s arguments: version 3, this
	// thread, every set empty.
	dropCapHdr  = [2]uint32{unix.LINUX_CAPABILITY_VERSION_3, 0}
	dropCapData [6]uint32
	// dropAcks counts the threads the handler has dropped; dropFailed is
	// set if any of their system calls failed.
	dropAcks, dropFailed uint32
)

// drops is the exec thread's record of the threads it asked to drop.
type drops struct {
	asked map[int]bool // by thread id, the exec thread itself included
	sent  uint32       // how many handler runs dropAcks must reach
}

// startDrop asks every thread of the init not asked yet to drop, and
// returns without waiting, so the handlers run beside the exec thread's
// own work (finishDrop waits). It runs on the exec thread as soon as the
// sandbox's /proc is mounted (the thread ids it lists, dir's path, must be
// the sandbox's, as tgkill takes them), so the handlers run beside the rest
// of the setup: asked only after the exec thread's own drop, the threads
// cost a cold start about 0.3 ms on a loaded 2-CPU host, waiting to be
// scheduled.
func (c *child) startDrop(dir int, path string) error {
	d := &c.sig.drops
	if d.asked == nil {
		dropUID, dropGID = c.cfg.UID, c.cfg.GID
		if c.drop {
			dropGroups = 1
		}
		d.asked = map[int]bool{unix.Gettid(): true}
	}
	tids, err := threads(dir, path)
	if err != nil {
		return stepErr(StepCapabilities, "/"+path, "list the init's threads", err)
	}
	for _, tid := range tids {
		if d.asked[tid] {
			continue
		}
		d.asked[tid] = true
		switch err := unix.Tgkill(1, tid, dropSig); err {
		case nil:
			d.sent++
		case unix.ESRCH: // gone meanwhile
		default:
			return stepErr(StepCapabilities, "", "signal the init's threads", err)
		}
	}
	return nil
}

// finishDrop runs on the exec thread after its own drop and before the
// filter: it waits for the handlers, then sweeps /proc/self/task again
// until no thread is left unasked, so one the runtime started meanwhile
// (cloned from an undropped thread) is dropped too; a thread started later
// is cloned from a dropped one.
func (c *child) finishDrop() error {
	d := &c.sig.drops
	for range 16 {
		if err := awaitAcks(d.sent); err != nil {
			return stepErr(StepCapabilities, "", "drop the credentials of the init's other threads", err)
		}
		if atomic.LoadUint32(&dropFailed) != 0 {
			return stepErr(StepCapabilities, "", "drop the credentials of the init's other threads", unix.EPERM)
		}
		before := d.sent
		if err := c.startDrop(unix.AT_FDCWD, "/proc/1/task"); err != nil {
			return err
		}
		if d.sent == before {
			return nil
		}
	}
	return stepErr(StepCapabilities, "", "the init's threads keep multiplying", unix.EAGAIN)
}

// futexWaitPrivate is FUTEX_WAIT|FUTEX_PRIVATE_FLAG (linux/futex.h).
const futexWaitPrivate = 0 | 128

// awaitAcks waits until the handler has dropped n threads. Go threads never
// exit in the init, so every signalled one answers; the timeout only keeps
// a broken promise from hanging the setup.
func awaitAcks(n uint32) error {
	ts := unix.Timespec{Nsec: 100e6}
	for range 20 {
		got := atomic.LoadUint32(&dropAcks)
		if got >= n {
			return nil
		}
		_, _, e := unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(&dropAcks)),
			futexWaitPrivate, uintptr(got), uintptr(unsafe.Pointer(&ts)), 0, 0)
		if e != 0 && e != unix.EAGAIN && e != unix.EINTR && e != unix.ETIMEDOUT {
			return e
		}
	}
	return unix.ETIMEDOUT
}

// threads lists the init's thread ids from path under dir, the task
// directory of the sandbox's /proc.
func threads(dir int, path string) ([]int, error) {
	fd, err := unix.Openat(dir, path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	var tids []int
	buf := make([]byte, 4096)
	for {
		n, err := unix.ReadDirent(fd, buf)
		if err != nil {
			return nil, err
		}
		if n == 0 {
			return tids, nil
		}
		var names []string
		_, _, names = unix.ParseDirent(buf[:n], -1, names)
		for _, name := range names {
			if tid, err := strconv.Atoi(name); err == nil {
				tids = append(tids, tid)
			}
		}
	}
}
