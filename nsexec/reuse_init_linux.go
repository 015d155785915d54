package nsexec

import (
	"encoding/binary"
	"fmt"
	"os"
	"runtime"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"github.com/moat-sandbox/moat/seccomp"
	"golang.org/x/sys/unix"
)

// The init's side of reuse (WithReuse; the launcher's is reuse_linux.go).
// The Go init keeps serving: it never hands over to the C tail, whose
// execve would end the loop, and it never drops its own privileges, since
// each dispatch needs them for its reset. Each tool gets a fresh locked OS
// thread of the init that
//
//  1. unshares new mount, ipc and network namespaces (unshare(2): each is
//     per thread, and CLONE_NEWNS unshares the thread's fs_struct too, so
//     its root, cwd and umask are its own; lo is brought up again),
//  2. mounts a fresh /tmp, /dev/shm, /dev/mqueue (of the new ipc
//     namespace: an mqueue superblock is its mounter's, ipc/mqueue.c
//     mqueue_get_tree) and each of the policy's tmpfs over the old ones,
//     and binds the dispatch's own empty workdir at /work,
//  3. drops to the tool's identity and capability sets, re-asserts the
//     init's non-dumpability (a credential change resets it,
//     kernel/cred.c commit_creds), and puts itself alone in the Landlock
//     domain and the filter (seccomp(2) without TSYNC),
//  4. forks the tool (syscall.ForkExec clones from the calling thread, so
//     the tool inherits all of the above), and ends: the goroutine never
//     unlocks, so the Go runtime discards the thread (runtime.LockOSThread),
//     and it creates no thread from a locked one (newm uses its template
//     thread then), so nothing else of the init gets that state.
//
// When the tool has been reaped, the init kills everything else in its pid
// namespace (kill(2) with -1 spares the caller only) and reaps until
// ECHILD, within reapWithin, and then compares what a tool could change of
// pid 1 (its rlimits, oom_score_adj, nice value and scheduling policy) with
// what it recorded before the first dispatch. It sends the tool's status,
// then msgReady for the next request, or exits, which discards the
// sandbox: after anything left, anything changed, a signal forwarded to
// the tool, or a tool killed by one.

// reapWithin bounds the reset's wait for the killed processes.
const reapWithin = 2 * time.Second

// pid1State is what the reset compares.
type pid1State struct {
	rlimits [unix.RLIMIT_RTTIME + 1]unix.Rlimit
	oomAdj  string
	nice    int
	policy  uintptr
}

// recordPid1 reads pid1State of the init: of its thread-group leader,
// pid 1, for the nice value and the scheduling policy, which are per
// thread, and the tool names pid 1.
func recordPid1() (pid1State, error) {
	var s pid1State
	for r := range s.rlimits {
		if err := unix.Prlimit(0, r, nil, &s.rlimits[r]); err != nil {
			return s, fmt.Errorf("rlimit %d: %w", r, err)
		}
	}
	b, err := os.ReadFile("/proc/self/oom_score_adj")
	if err != nil {
		return s, err
	}
	s.oomAdj = strings.TrimSpace(string(b))
	// getpriority(2) returns 20-nice through the raw call; the wrapper's
	// value is only compared.
	if s.nice, err = unix.Getpriority(unix.PRIO_PROCESS, 1); err != nil {
		return s, fmt.Errorf("getpriority: %w", err)
	}
	p, _, e := unix.RawSyscall(unix.SYS_SCHED_GETSCHEDULER, 1, 0, 0)
	if e != 0 {
		return s, fmt.Errorf("sched_getscheduler: %w", e)
	}
	s.policy = p
	return s, nil
}

// serveReuse serves dispatches until the launcher closes the socket or a
// reset fails; it never returns but with the SetupError of a dispatch's
// setup, which discards the sandbox (fail).
func (c *child) serveReuse() error {
	<-c.subscribed
	base, err := recordPid1()
	if err != nil {
		return stepErr(StepConfig, "", "reuse: record pid 1: "+err.Error(), unix.EIO)
	}
	var prog seccomp.Program
	if len(c.cfg.Seccomp) > 0 {
		if prog, err = seccomp.ParseProgram(c.cfg.Seccomp); err != nil {
			return stepErr(StepSeccomp, "", err.Error(), unix.EINVAL)
		}
	}
	for {
		// A signal for the last tool is not the next one's.
		for len(c.fwd) > 0 {
			<-c.fwd
		}
		if err := writeAll(c.sync, []byte{msgReady}); err != nil {
			os.Exit(exitSetup)
		}
		req, fds, err := readRequest(c.sync)
		if err != nil {
			os.Exit(exitSetup) // the launcher closed it: the sandbox ends
		}
		work, err := readWork(c.sync)
		if err != nil {
			os.Exit(exitSetup)
		}
		for i, fd := range fds {
			if err := unix.Dup3(fd, i, 0); err != nil {
				return stepErr(StepFDs, "", "stdio", err)
			}
			unix.Close(fd)
		}
		tool, err := c.dispatch(req, work, prog)
		if err != nil {
			return err
		}
		// The tool has its stdio; the init keeps none of it (a pipe's
		// reader waits for every writer), and /dev/null holds 0 to 2 so
		// that the next request's descriptors arrive above them.
		if err := nullStdio(); err != nil {
			return err
		}
		if err := writeAll(c.sync, []byte{msgStarted}); err != nil {
			os.Exit(exitLauncherGone)
		}
		ws, signaled := c.superviseOne(tool)
		kept := !signaled && !ws.Signaled() && c.reset(&base)
		msg := binary.BigEndian.AppendUint32([]byte{msgExit}, uint32(ws))
		if err := writeAll(c.sync, msg); err != nil || !kept {
			os.Exit(0) // discarded: the kernel ends the namespace
		}
	}
}

// nullStdio puts /dev/null at descriptors 0 to 2.
func nullStdio() error {
	fd, err := unix.Open("/dev/null", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return stepErr(StepFDs, "/dev/null", "reuse", err)
	}
	defer unix.Close(fd)
	for i := 0; i < 3; i++ {
		if err := unix.Dup3(fd, i, 0); err != nil {
			return stepErr(StepFDs, "", "reuse: stdio", err)
		}
	}
	return nil
}

// readWork reads the dispatch's workdir name, which follows its request:
// a 4-byte big-endian length and the name (empty: a fresh tmpfs at /work).
func readWork(fd int) (string, error) {
	var hdr [4]byte
	if err := readFull(fd, hdr[:]); err != nil {
		return "", err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n > 255 {
		return "", unix.ENAMETOOLONG
	}
	b := make([]byte, n)
	if err := readFull(fd, b); err != nil {
		return "", err
	}
	return string(b), nil
}

// dispatch runs the tool's setup on a fresh locked thread and returns the
// tool's pid.
func (c *child) dispatch(req *request, work string, prog seccomp.Program) (int, error) {
	type result struct {
		pid int
		err error
	}
	done := make(chan result, 1)
	go func() {
		// Never unlocked: the thread's namespaces, identity, Landlock
		// domain and filter end with it.
		runtime.LockOSThread()
		pid, err := c.dispatchThread(req, work, prog)
		done <- result{pid, err}
	}()
	r := <-done
	return r.pid, r.err
}

// dispatchThread is the tool's setup on its own thread (the steps above).
func (c *child) dispatchThread(req *request, work string, prog seccomp.Program) (int, error) {
	cfg := c.cfg
	if err := unix.Unshare(unix.CLONE_NEWNS | unix.CLONE_NEWIPC | unix.CLONE_NEWNET); err != nil {
		return 0, stepErr(StepConfig, "", "reuse: unshare mount, ipc and network namespaces", err)
	}
	// The tool's identity first, capabilities kept (switchIdentity says
	// how): the workdir is the sandbox id's alone, and the tmpfs mounts'
	// owner must be mapped.
	if terr := onThisThread(identityCalls(cfg.UID, cfg.GID, cfg.Groups, c.setGroups)); terr != nil {
		return 0, terr.setupErr()
	}
	if cfg.Network == NetworkLoopback {
		if err := loopbackUp(); err != nil {
			return 0, stepErr(StepNetwork, "lo", "reuse", err)
		}
	}
	if err := c.freshMounts(work); err != nil {
		return 0, err
	}
	cwd := "/"
	if cfg.Workdir != "" {
		cwd = "/work"
	}
	if cfg.Cwd != "" {
		cwd = cfg.Cwd
	}
	if err := unix.Chdir(cwd); err != nil {
		return 0, stepErr(StepCwd, cwd, "", err)
	}
	last, err := lastCap()
	if err != nil {
		return 0, err
	}
	if err := checkCaps(cfg.Caps, last); err != nil {
		return 0, err
	}
	if terr := onThisThread(capCalls(last, cfg.Caps, true)); terr != nil {
		return 0, terr.setupErr()
	}
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return 0, stepErr(StepExec, "", "PR_SET_DUMPABLE", err)
	}
	path, err := lookPath(req.Args[0], req.Env)
	if err != nil {
		return 0, stepErr(StepExec, req.Args[0], "", err)
	}
	if err := unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err != nil {
		return 0, stepErr(StepFDs, "", "close_range", err)
	}
	if err := c.restrictLandlock(-1); err != nil {
		return 0, err
	}
	if prog != nil {
		if err := loadThisThread(prog); err != nil {
			return 0, stepErr(StepSeccomp, "", "", err)
		}
	}
	pid, err := syscall.ForkExec(path, req.Args, &syscall.ProcAttr{
		Env:   req.Env,
		Files: []uintptr{0, 1, 2},
		Sys:   &syscall.SysProcAttr{Setsid: true, Setctty: cfg.Terminal, Ctty: 0},
	})
	if err != nil {
		return 0, stepErr(StepExec, path, "", err)
	}
	return pid, nil
}

// loadThisThread installs prog on the calling thread alone: seccomp(2)
// without SECCOMP_FILTER_FLAG_TSYNC (seccomp.Load synchronises every
// thread, which would filter the init that serves the next dispatch).
// no_new_privs is set already (capCalls).
func loadThisThread(p seccomp.Program) error {
	prog := unix.SockFprog{Len: uint16(len(p)), Filter: &p[0]}
	_, _, errno := unix.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, uintptr(unsafe.Pointer(&prog)))
	runtime.KeepAlive(p)
	if errno != 0 {
		return fmt.Errorf("load seccomp program on the dispatch thread: %w", errno)
	}
	return nil
}

// superviseOne forwards signals to the tool until it has been reaped, and
// returns its status and whether a signal was forwarded to it (a timeout,
// a cancel, an output cap: the sandbox is discarded after it). Orphans
// re-parented to the init meanwhile are reaped on the way.
func (c *child) superviseOne(tool int) (unix.WaitStatus, bool) {
	exited := make(chan unix.WaitStatus, 1)
	go func() {
		for {
			var ws unix.WaitStatus
			pid, err := unix.Wait4(-1, &ws, 0, nil)
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				os.Exit(exitSetup) // ECHILD: the tool is gone unseen
			}
			if pid == tool {
				exited <- ws
				return
			}
		}
	}()
	signaled := false
	for {
		select {
		case s := <-c.fwd:
			signaled = true
			_ = unix.Kill(tool, s.(syscall.Signal))
		case ws := <-exited:
			return ws, signaled
		}
	}
}

// reset ends every other process of the namespace and reports whether
// nothing is left and pid 1 is as it was (base).
func (c *child) reset(base *pid1State) bool {
	// kill(-1) reaches every process the init may signal but itself; the
	// init's main thread has the tools' uid (switchIdentity), so a tool
	// that changed its uid (one granted CAP_SETUID) is not reached, is not
	// reaped in time, and discards the sandbox.
	_ = unix.Kill(-1, unix.SIGKILL)
	reaped := make(chan bool, 1)
	go func() {
		for {
			_, err := unix.Wait4(-1, nil, 0, nil)
			if err == unix.EINTR || err == nil {
				continue
			}
			reaped <- err == unix.ECHILD
			return
		}
	}()
	select {
	case ok := <-reaped:
		if !ok {
			return false
		}
	case <-time.After(reapWithin):
		return false
	}
	// Nothing left to signal (ESRCH): no process of the namespace lives
	// that is not the init's child.
	if err := unix.Kill(-1, 0); err != unix.ESRCH {
		return false
	}
	now, err := recordPid1()
	return err == nil && now == *base
}
