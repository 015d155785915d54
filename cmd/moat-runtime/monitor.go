package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/moat-sandbox/moat/cgroups"
	"github.com/moat-sandbox/moat/nsexec"
	"github.com/moat-sandbox/moat/nsexec/oci"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// monitorCommand is the hidden command create starts the monitor with.
const monitorCommand = "__monitor"

// readyFD is the monitor's end of the pipe on which it tells create
// whether the container was created.
const readyFD = 3

// ready is the monitor's one report to create.
type ready struct {
	Pid   int    `json:"pid,omitempty"`
	Error string `json:"error,omitempty"`
}

// monitor holds one container: the prepared sandbox until start, then the
// running one, until it ends.
type monitor struct {
	id    string
	dir   *oci.Dir
	state *oci.State
	plan  *oci.Plan
	log   *slog.Logger
	leaf  *cgroups.Leaf
	stdio nsexec.Stdio
	pty   *os.File // the terminal's slave, when process.terminal
	ln    *net.UnixListener
	sigs  chan os.Signal

	mu      sync.Mutex
	pending *nsexec.Pending
	proc    *nsexec.Process
}

// monitorMain is the monitor process: argv is ID BUNDLE CONSOLE-SOCKET.
// It never returns on success: it exits with the container's status.
func monitorMain(g global, argv []string) int {
	readyPipe := os.NewFile(readyFD, "ready")
	rl := openLog(g)
	fail := func(err error) int {
		rl.logger.Error(err.Error())
		json.NewEncoder(readyPipe).Encode(ready{Error: err.Error()})
		return exitFail
	}
	if len(argv) != 3 {
		return fail(errors.New("monitor: want ID BUNDLE CONSOLE-SOCKET"))
	}
	m, err := newMonitor(g, rl.logger, argv[0], argv[1], argv[2])
	if err != nil {
		return fail(err)
	}
	// Signals sent to the monitor (the pid the engine knows) go to the
	// container, as they would to runc's init.
	m.sigs = make(chan os.Signal, 8)
	signal.Notify(m.sigs, unix.SIGTERM, unix.SIGINT, unix.SIGHUP, unix.SIGQUIT, unix.SIGUSR1, unix.SIGUSR2)
	json.NewEncoder(readyPipe).Encode(ready{Pid: os.Getpid()})
	readyPipe.Close()
	return m.serve()
}

func newMonitor(g global, log *slog.Logger, id, bundle, consoleSocket string) (*monitor, error) {
	root, err := oci.OpenRoot(g.root)
	if err != nil {
		return nil, err
	}
	dir, err := root.Open(id)
	if err != nil {
		return nil, err
	}
	spec, bundle, err := oci.LoadBundle(bundle)
	if err != nil {
		return nil, err
	}
	plan, err := oci.Translate(spec, bundle, nsexec.IsHostRoot())
	if err != nil {
		return nil, err
	}
	for _, n := range plan.Notes {
		log.Debug("config", "note", n)
	}
	m := &monitor{id: id, dir: dir, plan: plan, log: log,
		stdio: nsexec.Stdio{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr}}
	if plan.Terminal {
		if consoleSocket == "" {
			return nil, errors.New("process.terminal is set but no --console-socket was given")
		}
		if m.pty, err = sendConsole(consoleSocket, plan.ConsoleSize); err != nil {
			return nil, err
		}
		m.stdio = nsexec.Stdio{Stdin: m.pty, Stdout: m.pty, Stderr: m.pty}
	}
	if err := oci.CreateTargets(plan.Config.Rootfs, plan.Targets); err != nil {
		return nil, err
	}
	prog, err := filterFor(plan.Seccomp)
	if err != nil {
		return nil, err
	}
	cfg := plan.Config
	cfg.Seccomp = prog
	raiseRlimits(cfg.Rlimits)
	opts := append([]nsexec.Option{nsexec.WithLogger(log)}, initOption()...)
	opts = append(opts, identityOptions(plan)...)
	jopts, closeJoins, err := joinOptions(plan)
	if err != nil {
		return nil, err
	}
	defer closeJoins()
	opts = append(opts, jopts...)
	leaf, copts, placed, err := cgroupFor(id, plan.Resources, log)
	if err != nil {
		return nil, err
	}
	m.leaf = leaf
	opts = append(opts, copts...)
	cfg.CgroupNS = plan.CgroupNS && leaf != nil
	pending, err := nsexec.Prepare(context.Background(), &cfg, opts...)
	placed()
	if err != nil {
		m.deleteLeaf()
		return nil, fmt.Errorf("create the sandbox: %w", err)
	}
	if err := oci.SetOOMScoreAdj(pending.Pid(), plan.OOMScoreAdj); err != nil {
		pending.Close()
		m.deleteLeaf()
		return nil, err
	}
	m.pending = pending
	if m.ln, err = net.ListenUnix("unix", &net.UnixAddr{Name: dir.At(controlSocket), Net: "unix"}); err != nil {
		pending.Close()
		m.deleteLeaf()
		return nil, fmt.Errorf("listen for start: %w", err)
	}
	start, err := oci.StartTime(os.Getpid())
	if err != nil {
		return nil, err
	}
	m.state = &oci.State{State: specs.State{Version: specs.Version, ID: id, Status: specs.StateCreated,
		Pid: os.Getpid(), Bundle: bundle, Annotations: spec.Annotations}, PidStart: start, Created: time.Now().UTC()}
	if err := dir.WriteState(m.state); err != nil {
		pending.Close()
		m.deleteLeaf()
		return nil, err
	}
	return m, nil
}

// serve answers start and kill until the container ends, then exits with
// its status.
func (m *monitor) serve() int {
	conns := make(chan *net.UnixConn)
	go func() {
		for {
			c, err := m.ln.AcceptUnix()
			if err != nil {
				return
			}
			conns <- c
		}
	}()
	exited := make(chan nsexec.Exit, 1)
	pendingDone := m.pending.Done()
	for {
		select {
		case c := <-conns:
			m.answer(c, exited)
		case sig := <-m.sigs:
			if st, done := m.signal(sig.(syscall.Signal), false); done {
				return m.finish(st)
			}
		case <-pendingDone:
			// The prepared sandbox died before its start.
			m.log.Warn("the created sandbox ended before start")
			return m.finish(nsexec.Exit{Code: 137, Signal: unix.SIGKILL})
		case st := <-exited:
			return m.finish(st)
		}
		m.mu.Lock()
		if m.pending == nil {
			pendingDone = nil
		}
		m.mu.Unlock()
	}
}

func (m *monitor) answer(c *net.UnixConn, exited chan nsexec.Exit) {
	defer c.Close()
	if !peerAllowed(c) {
		return
	}
	c.SetDeadline(time.Now().Add(controlTimeout))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return
	}
	f := strings.Fields(line)
	reply := func(err error) {
		if err != nil {
			fmt.Fprintf(c, "error: %v\n", err)
			return
		}
		fmt.Fprintln(c, "ok")
	}
	switch {
	case len(f) == 1 && f[0] == "start":
		reply(m.startProcess(exited))
	case len(f) >= 2 && f[0] == "kill":
		n, err := strconv.Atoi(f[1])
		if err != nil || n <= 0 || n > 64 {
			reply(fmt.Errorf("bad signal %q", f[1]))
			return
		}
		st, done := m.signal(syscall.Signal(n), len(f) == 3 && f[2] == "all")
		reply(nil)
		if done {
			c.Close()
			os.Exit(m.finish(st))
		}
	default:
		reply(fmt.Errorf("unknown request %q", strings.TrimSpace(line)))
	}
}

// startProcess hands the prepared sandbox its process.
func (m *monitor) startProcess(exited chan nsexec.Exit) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.pending == nil {
		return fmt.Errorf("container %s is %s, not created", m.id, m.state.Status)
	}
	p := m.pending
	m.pending = nil
	proc, err := p.Exec(context.Background(), m.plan.Args, m.plan.Env, m.stdio)
	if err != nil {
		m.state.Status = specs.StateStopped
		m.dir.WriteState(m.state)
		go func() { exited <- nsexec.Exit{Code: 127} }()
		return fmt.Errorf("start the container's process: %w", err)
	}
	m.proc = proc
	m.dropStdio()
	m.state.Status = specs.StateRunning
	if err := m.dir.WriteState(m.state); err != nil {
		m.log.Warn("record the running state", "err", err)
	}
	go func() {
		st, err := proc.Wait()
		if err != nil {
			m.log.Warn("wait for the container", "err", err)
		}
		exited <- st
	}()
	return nil
}

// dropStdio lets go of the container's stdio once the process holds it,
// so the engine's pipes end when the container does.
func (m *monitor) dropStdio() {
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		return
	}
	defer null.Close()
	for fd := 0; fd < 3; fd++ {
		unix.Dup3(int(null.Fd()), fd, 0)
	}
	if m.pty != nil {
		m.pty.Close()
	}
}

// signal sends sig to the container: a created one ends (its status as if
// sig had killed it), a running one's init forwards it to the process.
// With all and SIGKILL the whole cgroup leaf is killed too.
func (m *monitor) signal(sig syscall.Signal, all bool) (nsexec.Exit, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.pending != nil {
		m.pending.Close()
		m.pending = nil
		return nsexec.Exit{Code: 128 + int(sig), Signal: sig}, true
	}
	if m.proc == nil {
		return nsexec.Exit{}, false
	}
	if all && sig == unix.SIGKILL && m.leaf != nil {
		m.leaf.Kill()
	}
	if err := m.proc.Signal(sig); err != nil {
		m.log.Debug("signal the container", "signal", sig, "err", err)
	}
	return nsexec.Exit{}, false
}

// finish records the stopped state, removes the cgroup leaf and returns
// the status the monitor exits with (or dies of the same signal).
func (m *monitor) finish(st nsexec.Exit) int {
	m.ln.Close()
	m.deleteLeaf()
	status := st.Code
	if st.Signal != 0 {
		status = 128 + int(st.Signal)
	}
	m.state.Status = specs.StateStopped
	m.state.Exit = &status
	if err := m.dir.WriteState(m.state); err != nil {
		m.log.Warn("record the stopped state", "err", err)
	}
	if st.Signal == unix.SIGKILL || st.Signal == unix.SIGTERM || st.Signal == unix.SIGINT || st.Signal == unix.SIGHUP {
		// The engine reads a wait status: die of the same signal, so it
		// sees what runc's init would have shown.
		signal.Reset(st.Signal)
		unix.Kill(os.Getpid(), st.Signal)
		time.Sleep(time.Second)
	}
	return status
}

func (m *monitor) deleteLeaf() {
	if m.leaf == nil {
		return
	}
	if err := m.leaf.Delete(); err != nil {
		m.log.Warn("remove the container's cgroup", "err", err)
	}
	m.leaf = nil
}
