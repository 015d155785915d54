package nsexec

import (
	"encoding/json"
	"io"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// InitArgv0 is the argv[0] of the sandbox child; it shows in ps.
const InitArgv0 = "moat-sandbox-init"

// initFDEnv names the descriptor of the sync socket in the child. It is the
// second signal (with InitArgv0) that this process is a sandbox child.
const initFDEnv = "_MOAT_INIT_FD"

// initGodebug is the only other variable of the child's environment. Go
// 1.25's cgroup-aware GOMAXPROCS keeps the launcher's cgroup cpu.cfs_*
// files open for the life of the process (runtime/cgroup_linux.go); the
// init stays for the whole run and must hold no descriptor of a host file,
// so it reads them once at start and closes them. Asynchronous preemption
// is off: its SIGURG, sent to the exec thread while that thread blocks
// every signal for the handover to the tail, would wait in the queue and
// reach the tool as if someone had sent it (tail_linux.go).
const initGodebug = "GODEBUG=containermaxprocs=0,updatemaxprocs=0,asyncpreemptoff=1"

// exitSetup is the child's exit status when the setup failed (as runc and
// crun use 125 for "the runtime failed").
const exitSetup = 125

var initCalled atomic.Bool

// Init must be called first in main, and in TestMain of every test package
// that starts sandboxes. In a normal process it returns at once. In a
// sandbox child it never returns: it stays pid 1, runs the tool as its only
// child and exits with the tool's status, or reports a SetupError to the
// parent and exits 125.
func Init() {
	initCalled.Store(true)
	if len(os.Args) != 1 || os.Args[0] != InitArgv0 {
		return
	}
	v, ok := os.LookupEnv(initFDEnv)
	if !ok {
		return
	}
	// Everything per-thread (credentials, capabilities, securebits,
	// no_new_privs, the parent-death signal) is applied to this thread, and
	// execve keeps exactly the calling thread's state, so the goroutine must
	// stay on it until the exec.
	runtime.LockOSThread()
	fd, err := strconv.Atoi(v)
	if err != nil || fd < 3 {
		os.Exit(exitSetup)
	}
	c := &child{sync: fd, egress: -1, procFD: -1, workdirFD: -1}
	c.marks[markInit] = monotonic()
	err = c.run()
	c.fail(err)
}

// child is the state of the sandbox child between the handshake and the exec.
type child struct {
	sync int
	cfg  *Config
	srcs sourceIDs // the inodes the parent opened for cfg's host paths
	// setGroups: setgroups is allowed in the sandbox's user namespace, so
	// the child sets cfg.Groups (clearing what it inherited).
	setGroups bool
	// deferred: stop before the exec and wait for the request (Prepare).
	deferred bool
	// trace: send the stage marks before the exec (WithTrace).
	trace bool
	marks [numMarks]int64
	// fwd receives the signals to forward once subscribed is closed
	// (subscribe).
	fwd        chan os.Signal
	subscribed chan struct{}
	// egress is the forwarder's listening socket, or -1 (egress_linux.go).
	egress int
	// tail: hand over to the C tail once the setup is done (tail_linux.go);
	// self is the descriptor of the binary that has it.
	tail bool
	self int
	// procFD is the procfs of a joined pid namespace the parent made, or
	// of its own that the constructor made before joining a user
	// namespace (userns.c), or -1 (WithJoin); keepHostname: the uts
	// namespace is a joined one.
	procFD       int
	keepHostname bool
	// reaper: the init is not pid 1 of its pid namespace (a joined one),
	// so it is the child subreaper of what it starts and ends it itself
	// (pid1_linux.go, endDescendants).
	reaper bool
	// tool is the tool's pid once it runs (supervise), for leave.
	tool int
	// handover: no parent-death signal (WithHandover).
	handover bool
	// tmpDir is the run's TMPDIR in mode no-userns (nouserns_linux.go);
	// workdirFD the workdir it holds there, or -1.
	tmpDir    string
	workdirFD int
	// sendMu serializes the init's messages to its launcher once the
	// tool runs (the reaper's, the exec thread's).
	sendMu sync.Mutex
}

// mark records the end of a stage when tracing.
func (c *child) mark(i int) {
	if c.trace {
		c.marks[i] = monotonic()
	}
}

// run never returns on success: the last step execs the tool.
func (c *child) run() error {
	// The init is non-dumpable so nothing in the sandbox can ptrace it or
	// open its /proc/1/{mem,fd,exe,root,environ} (CVE-2016-9962), for its
	// whole life (startTool re-asserts it); the tool gets a fresh dumpable
	// state at its exec.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return stepErr(StepConfig, "", "PR_SET_DUMPABLE", err)
	}
	if _, err := unix.FcntlInt(uintptr(c.sync), unix.F_SETFD, unix.FD_CLOEXEC); err != nil {
		return stepErr(StepConfig, "", "sync socket", err)
	}
	w, err := readFrame(c.sync)
	if err != nil {
		return stepErr(StepConfig, "", err.Error(), err)
	}
	// Asked to join a user namespace, the constructor did (userns.c) or
	// failed, and a failed join ends the init here, still in its
	// launcher's user namespace, before anything else.
	if _, err := userJoined(); err != nil {
		return err
	}
	c.cfg, c.setGroups, c.trace, c.deferred, c.srcs, c.handover = w.Config, w.SetGroups, w.Trace, w.Deferred, w.Sources, w.Handover
	next := firstTasksFD + w.Tasks // the descriptors after the tasks files
	if c.tail = w.Tail; c.tail {
		c.self, next = next, next+1
	} else {
		c.subscribe()
	}
	if w.Proc {
		c.procFD = next
	}
	c.keepHostname = w.KeepHostname || c.cfg.NoUserNS
	c.tmpDir = w.TmpDir
	if unix.Getpid() != 1 {
		// Born in a joined pid namespace: the kernel will not end what
		// the init leaves behind (zap_pid_ns_processes is for a
		// namespace's init), and an orphan would go to that namespace's
		// pid 1, another container's. As the subreaper, the init gets
		// them (prctl(2) PR_SET_CHILD_SUBREAPER; kept across the tail's
		// execve) and ends them at its exit.
		if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
			return stepErr(StepConfig, "", "PR_SET_CHILD_SUBREAPER", err)
		}
		// Spawned without the parent-death signal there (start_linux.go
		// sysProcAttr says why): armed here.
		if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0, 0, 0); err != nil {
			return stepErr(StepConfig, "", "PR_SET_PDEATHSIG", err)
		}
		c.reaper = true
	}
	if err := joinTasks(w.Tasks); err != nil {
		return err
	}
	c.mark(markConfig)
	if err := writeAll(c.sync, []byte{msgHello}); err != nil {
		os.Exit(exitSetup)
	}
	var b [1]byte
	if err := readFull(c.sync, b[:]); err != nil || b[0] != msgGo {
		os.Exit(exitSetup) // the parent gave up or died
	}
	// After the parent placed us in our cgroup, so the namespace's root is
	// the leaf, not its parent (peers.md 2c.8).
	if c.cfg.CgroupNS {
		if err := unix.Unshare(unix.CLONE_NEWCGROUP); err != nil {
			return stepErr(StepCgroupNS, "", "unshare CLONE_NEWCGROUP", err)
		}
	}
	c.mark(markGo)
	if c.cfg.NoUserNS { // the host's root, no mount namespace
		if err := c.holdWorkdir(); err != nil {
			return err
		}
	} else if err := c.buildRoot(); err != nil {
		return err
	}
	if err := c.hygiene(); err != nil {
		return err
	}
	c.mark(markHygiene)
	if w.Check {
		if err := checkTool(c.cfg.Args[0], c.cfg.Env); err != nil {
			return err
		}
	}
	if w.Reuse {
		return c.serveReuse() // reuse_init_linux.go
	}
	if c.deferred && !c.tail {
		if err := c.await(); err != nil {
			return err
		}
	}
	return c.exec()
}

// joinTasks moves this thread, the one that execs the tool, into the cgroup
// v1 leaf whose "tasks" files are descriptors 4 to 4+n-1, and closes them
// (WithCgroupTasks says why a thread moves itself).
func joinTasks(n int) error {
	for fd := firstTasksFD; fd < firstTasksFD+n; fd++ {
		_, err := unix.Write(fd, []byte("0"))
		unix.Close(fd)
		if err != nil {
			for rest := fd + 1; rest < firstTasksFD+n; rest++ {
				unix.Close(rest)
			}
			return stepErr(StepCgroup, "", "join the cgroup leaf (write 0 to tasks)", err)
		}
	}
	return nil
}

// firstTasksFD is where the tasks files start: after stdio and the sync
// socket.
const firstTasksFD = 4

// await tells the parent the sandbox is ready and waits for the request of
// its one dispatch: the argv, the environment and the stdio descriptors,
// which replace the /dev/null the init was started with. A parent that
// closes the socket instead (a drained pool) ends the sandbox.
func (c *child) await() error {
	// Ready means a signal sent from now on reaches the tool once it runs:
	// the subscription must be complete (a signal it has not reached yet
	// is the Go runtime's, which drops SIGUSR1 and dies of SIGTERM;
	// TestSignalQueuedBeforeTheTool lost one in three before).
	<-c.subscribed
	if err := writeAll(c.sync, []byte{msgReady}); err != nil {
		os.Exit(exitSetup)
	}
	req, fds, err := readRequest(c.sync)
	if err == io.ErrUnexpectedEOF || err == unix.ECONNRESET {
		os.Exit(exitSetup)
	}
	if err != nil {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return stepErr(StepConfig, "", "request: "+err.Error(), err)
	}
	for i, fd := range fds {
		// dup3 without O_CLOEXEC: the copy at 0, 1 or 2 survives the exec,
		// the received descriptor (close-on-exec) is closed now.
		if err := unix.Dup3(fd, i, 0); err != nil {
			return stepErr(StepFDs, "", "stdio", err)
		}
		unix.Close(fd)
	}
	c.cfg.Args, c.cfg.Env = req.Args, req.Env
	return nil
}

// fail reports err to the parent and exits 125.
func (c *child) fail(err error) {
	r := report{Step: StepUnknown, Errno: int(unix.EIO), Detail: "unexpected"}
	if se, ok := err.(*SetupError); ok {
		r = report{Step: se.Step, Path: se.Path, Errno: int(se.Errno), Detail: se.Detail}
	}
	b, _ := json.Marshal(r)
	_ = writeAll(c.sync, append([]byte{msgError}, b...))
	os.Exit(exitSetup)
}

// stepErr builds the SetupError of a failed step.
func stepErr(step Step, path, detail string, err error) *SetupError {
	return &SetupError{Step: step, Path: path, Detail: detail, Errno: errnoOf(err)}
}
