package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/moat-sandbox/moat/nsexec"
	"github.com/moat-sandbox/moat/nsexec/hostpath"
	"github.com/moat-sandbox/moat/nsexec/oci"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

type runtime struct {
	global global
	log    *runtimeLog
}

// createOpts are create's and run's options.
type createOpts struct {
	id, bundle, pidFile, consoleSocket string
	// systemdCgroup is the global --systemd-cgroup: cgroupsPath is the
	// systemd driver's slice:prefix:name.
	systemdCgroup bool
}

func parseCreate(args []string) (createOpts, map[string]bool, error) {
	vals, flags, pos, err := parseCommand(args,
		[]string{"bundle", "b", "pid-file", "console-socket", "preserve-fds"},
		[]string{"no-pivot", "no-new-keyring", "detach", "d", "keep", "no-subreaper"})
	if err != nil {
		return createOpts{}, nil, err
	}
	if len(pos) != 1 {
		return createOpts{}, nil, fmt.Errorf("want exactly one container ID, got %d arguments", len(pos))
	}
	if n := vals["preserve-fds"]; n != "" && n != "0" {
		return createOpts{}, nil, fmt.Errorf("--preserve-fds %s is not supported: a moat sandbox gets stdio only (the CVE-2024-21626 lesson)", n)
	}
	o := createOpts{id: pos[0], bundle: vals["bundle"], pidFile: vals["pid-file"], consoleSocket: vals["console-socket"]}
	if o.bundle == "" {
		o.bundle = vals["b"]
	}
	if o.bundle == "" {
		o.bundle = "."
	}
	return o, flags, nil
}

func (r *runtime) create(args []string) error {
	o, _, err := parseCreate(args)
	if err != nil {
		return err
	}
	c, err := r.createContainer(o)
	if err != nil {
		return err
	}
	// The init and the monitor are this process's children: once it
	// exits, they are the engine's subreaper's (handoff.go).
	c.mon.Process.Release()
	return nil
}

// container is what createContainer made: the monitor and the init, both
// this process's children until it exits.
type container struct {
	id   string
	mon  *exec.Cmd
	init *nsexec.Process
}

// createContainer checks the bundle, makes the state directory, starts the
// monitor, spawns the sandbox and hands it over (handoff.go); it returns
// once the container is created, or with the reason it is not and nothing
// of it left.
func (r *runtime) createContainer(o createOpts) (*container, error) {
	if err := oci.ValidID(o.id); err != nil {
		return nil, err
	}
	o.systemdCgroup = r.global.systemdCgroup
	spec, bundle, err := oci.LoadBundle(o.bundle)
	if err != nil {
		return nil, err
	}
	plan, err := oci.Translate(spec, bundle, nsexec.IsHostRoot())
	if err != nil {
		return nil, err
	}
	root, err := oci.OpenRoot(r.global.root)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	dir, err := root.Create(o.id)
	if err != nil {
		return nil, err
	}
	defer dir.Close()
	if err := saveHooks(dir, spec.Hooks); err != nil { // hooks.go
		removeDir(root, o.id)
		return nil, err
	}
	mon, conn, err := r.startMonitor(root, o.id, plan.Terminal)
	if err != nil {
		removeDir(root, o.id)
		return nil, err
	}
	init, err := r.handOver(o, spec, bundle, plan, dir, mon, conn)
	if err != nil {
		// The monitor undoes what is left at the socket's EOF before a
		// commit (the sandbox, the leaf, the state directory); create
		// returns once it has.
		conn.Close()
		waitMonitor(mon)
		removeDir(root, o.id)
		afterFailedCreate(err, o.id, bundle, spec, r.log.logger)
		return nil, err
	}
	conn.Close()
	return &container{id: o.id, mon: mon, init: init}, nil
}

// startMonitor starts the container's monitor, waiting for its handoff on
// a socketpair, in its own session, as runc's init has: the caller's
// terminal signals reach the container through the engine, not by
// accident. Its stdio is this process's, the container's process's to be;
// with a terminal the process's stdio is the pty, and the monitor's is
// /dev/null: it keeps nothing of the engine's that is not its to keep.
// containerd's runc shim reads create's stdout and stderr through pipes
// until they close (go-runc), so a monitor that held them hung `ctr run
// -t` for ever.
func (r *runtime) startMonitor(root *oci.Root, id string, terminal bool) (*exec.Cmd, *net.UnixConn, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, nil, err
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("start the container's monitor: %w", err)
	}
	theirs := os.NewFile(uintptr(fds[1]), "handoff")
	defer theirs.Close()
	mine, err := handoffConn(os.NewFile(uintptr(fds[0]), "handoff"))
	if err != nil {
		return nil, nil, err
	}
	args := []string{"--root", root.Path(), "--log-format", r.global.logFormat}
	if r.global.logPath != "" {
		args = append(args, "--log", r.global.logPath)
	}
	if r.global.debug {
		args = append(args, "--debug")
	}
	mon := exec.Command(self, append(args, monitorCommand, id)...)
	if !terminal {
		mon.Stdin, mon.Stdout, mon.Stderr = os.Stdin, os.Stdout, os.Stderr
	}
	mon.ExtraFiles = []*os.File{theirs} // handoffFD
	mon.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := mon.Start(); err != nil {
		mine.Close()
		return nil, nil, fmt.Errorf("start the container's monitor: %w", err)
	}
	return mon, mine, nil
}

// handOver spawns the container's sandbox and gives it to the monitor; it
// returns the init, this process's child, once the monitor has it and the
// pid file is written.
func (r *runtime) handOver(o createOpts, spec *specs.Spec, bundle string, plan *oci.Plan, dir *oci.Dir, mon *exec.Cmd, conn *net.UnixConn) (*nsexec.Process, error) {
	sb, err := prepareSandbox(o, r.global.root, spec, plan, r.log.logger, mon.Process.Pid)
	if err != nil {
		return nil, err
	}
	defer sb.close()
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: dir.At(controlSocket), Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("listen for the container's control requests: %w", err)
	}
	// The listening socket stays bound for the monitor, which gets a copy.
	ln.SetUnlinkOnClose(false)
	lnFile, err := ln.File()
	ln.Close()
	if err != nil {
		return nil, fmt.Errorf("listen for the container's control requests: %w", err)
	}
	defer lnFile.Close()
	h, proc, err := sb.pending.Detach()
	if err != nil {
		return nil, fmt.Errorf("create the sandbox: %w", err)
	}
	sb.pending = nil
	// This process's copies go once the monitor has its own: from then
	// on the sandbox lives as long as the monitor holds the sync socket.
	defer h.Close()
	msg := &handoff{ID: o.id, Bundle: bundle, Annotations: spec.Annotations, Pid: h.Pid, HostID: h.HostID,
		Lease: h.Lease != nil, Pty: sb.pty != nil, Args: plan.Args, Env: plan.Env,
		Cwd: plan.Config.Cwd, UID: plan.Config.UID, GID: plan.Config.GID, Process: spec.Process, Caps: heldCaps(plan)}
	if sb.leaf != nil {
		msg.Leaf = leafID(o.id)
		// The group's path as the cgroupfs driver resolves it (for the
		// systemd driver, the scope's group).
		if p := sb.leaf.Path(); p != "" {
			msg.CgroupsPath, msg.CgroupMade = p, sb.leaf.Made()
			// For delete, should the monitor be killed before it
			// removes them (deleteOrphanCgroup).
			if err := dir.WriteCgroup(&oci.Cgroup{Path: p, Made: msg.CgroupMade}); err != nil {
				return nil, err
			}
		}
	}
	files := append(h.Files(), lnFile)
	if sb.pty != nil {
		files = append(files, sb.pty)
	}
	conn.SetDeadline(time.Now().Add(handoffTimeout))
	if err := writeLine(conn, msg, files...); err != nil {
		proc.Signal(unix.SIGKILL)
		return nil, fmt.Errorf("hand the container to its monitor: %w", err)
	}
	var rep handoffReply
	lc := &lineConn{c: conn}
	if got, err := lc.readLine(&rep); err != nil || !rep.OK {
		closeAll(got)
		proc.Signal(unix.SIGKILL)
		if rep.Error != "" {
			return nil, errors.New(rep.Error)
		}
		return nil, fmt.Errorf("the container's monitor failed before it answered: %w", err)
	}
	// The prestart and createRuntime hooks (hooks.go), which take their
	// own time; a failure ends the sandbox, and the monitor undoes the
	// rest without a commit.
	conn.SetDeadline(time.Time{})
	if err := createHooks(spec.Hooks, dir, r.log.logger); err != nil {
		proc.Signal(unix.SIGKILL)
		return nil, fmt.Errorf("create container %s: %w", o.id, err)
	}
	if o.pidFile != "" {
		if err := writePidFile(o.pidFile, h.Pid); err != nil {
			return nil, err
		}
	}
	if err := writeLine(conn, handoffCommit{Commit: true}); err != nil {
		return nil, fmt.Errorf("hand the container to its monitor: %w", err)
	}
	sb.leaf = nil // the monitor's now
	return proc, nil
}

// handoffTimeout bounds create's wait for its monitor.
const handoffTimeout = 30 * time.Second

// waitMonitor waits (a bounded while) for a monitor that is undoing a
// failed create.
func waitMonitor(mon *exec.Cmd) {
	done := make(chan struct{})
	go func() { mon.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(handoffTimeout):
		mon.Process.Kill()
		<-done
	}
}

// removeDir removes a container's state directory, if it is still there.
func removeDir(root *oci.Root, id string) {
	if d, err := root.Open(id); err == nil {
		d.Remove()
	}
}

// writePidFile writes pid to path through a new file renamed into place,
// so an engine polling it never reads half a number. The file's directory
// is resolved once by the rule of nsexec/hostpath (a symlink on the way is
// followed only if root or the caller could have planted it), and the file
// is created and renamed below that descriptor: a link another user left
// on the way cannot have root write where it points.
func writePidFile(path string, pid int) error {
	dir, _, name, err := hostpath.OpenParent(path)
	if err != nil {
		return fmt.Errorf("write --pid-file %s: %w", path, err)
	}
	defer unix.Close(dir)
	tmp := "." + name + ".moat" + strconv.Itoa(os.Getpid())
	fd, err := unix.Openat(dir, tmp, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return fmt.Errorf("write --pid-file %s: %w", path, err)
	}
	f := os.NewFile(uintptr(fd), tmp)
	_, err = f.WriteString(strconv.Itoa(pid))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		// rename(2) replaces whatever is at name, a link itself included,
		// never what a link points to.
		err = unix.Renameat(dir, tmp, dir, name)
	}
	if err != nil {
		unix.Unlinkat(dir, tmp, 0)
		return fmt.Errorf("write --pid-file %s: %w", path, err)
	}
	return nil
}

// runCmd is runc run: create, start, and unless --detach wait for the
// container and exit with its status. This process is create, the init's
// parent: it reaps the init itself, as runc run does.
func (r *runtime) runCmd(args []string) error {
	o, flags, err := parseCreate(args)
	if err != nil {
		return err
	}
	c, err := r.createContainer(o)
	if err != nil {
		return err
	}
	if err := r.start([]string{o.id}); err != nil {
		c.init.Signal(unix.SIGKILL)
		c.init.Wait()
		c.mon.Wait()
		r.remove(o.id)
		return err
	}
	if flags["detach"] || flags["d"] {
		c.mon.Process.Release()
		return nil
	}
	// runc run forwards the signals it gets to the container's init,
	// which forwards them on to the process.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, unix.SIGTERM, unix.SIGINT, unix.SIGHUP, unix.SIGQUIT, unix.SIGUSR1, unix.SIGUSR2)
	go func() {
		for sig := range sigs {
			c.init.Signal(sig)
		}
	}()
	x, err := c.init.Wait()
	signal.Stop(sigs)
	close(sigs)
	// The monitor records the end and removes the cgroup leaf.
	waitMonitor(c.mon)
	if !flags["keep"] {
		r.remove(o.id)
	}
	if err != nil {
		return err
	}
	// The init exits with the process's status, 128+N for signal N; an
	// init killed itself (SIGKILL) shows as the signal.
	if x.Signal != 0 {
		return exitCode(128 + int(x.Signal))
	}
	return exitCode(x.Code)
}
