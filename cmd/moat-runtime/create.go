package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/moat-sandbox/moat/nsexec"
	"github.com/moat-sandbox/moat/nsexec/hostpath"
	"github.com/moat-sandbox/moat/nsexec/oci"
	"golang.org/x/sys/unix"
)

type runtime struct {
	global global
	log    *runtimeLog
}

// createOpts are create's and run's options.
type createOpts struct {
	id, bundle, pidFile, consoleSocket string
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
	mon, err := r.createContainer(o)
	if err != nil {
		return err
	}
	return mon.Process.Release()
}

// createContainer checks the bundle, makes the state directory and starts
// the monitor, which prepares the sandbox; it returns once the container
// is created (or failed, with the monitor's reason).
func (r *runtime) createContainer(o createOpts) (*exec.Cmd, error) {
	if err := oci.ValidID(o.id); err != nil {
		return nil, err
	}
	spec, bundle, err := oci.LoadBundle(o.bundle)
	if err != nil {
		return nil, err
	}
	if _, err := oci.Translate(spec, bundle, nsexec.IsHostRoot()); err != nil {
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
	self, err := os.Executable()
	if err != nil {
		dir.Remove()
		return nil, err
	}
	rd, wr, err := os.Pipe()
	if err != nil {
		dir.Remove()
		return nil, err
	}
	args := []string{"--root", root.Path(), "--log-format", r.global.logFormat}
	if r.global.logPath != "" {
		args = append(args, "--log", r.global.logPath)
	}
	if r.global.debug {
		args = append(args, "--debug")
	}
	args = append(args, monitorCommand, o.id, bundle, o.consoleSocket)
	mon := exec.Command(self, args...)
	mon.Stdin, mon.Stdout, mon.Stderr = os.Stdin, os.Stdout, os.Stderr
	mon.ExtraFiles = []*os.File{wr}
	// Its own session, as runc's init has: the caller's terminal signals
	// reach the container through the engine, not by accident.
	mon.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := mon.Start(); err != nil {
		wr.Close()
		rd.Close()
		dir.Remove()
		return nil, fmt.Errorf("start the container's monitor: %w", err)
	}
	wr.Close()
	var rep ready
	err = json.NewDecoder(rd).Decode(&rep)
	rd.Close()
	if err != nil || rep.Error != "" {
		mon.Process.Kill()
		mon.Wait()
		dir.Remove()
		if rep.Error != "" {
			return nil, errors.New(rep.Error)
		}
		return nil, fmt.Errorf("the container's monitor failed before it reported: %w", err)
	}
	dir.Close()
	if o.pidFile != "" {
		if err := writePidFile(o.pidFile, rep.Pid); err != nil {
			mon.Process.Kill()
			mon.Wait()
			if d, derr := root.Open(o.id); derr == nil {
				d.Remove()
			}
			return nil, err
		}
	}
	return mon, nil
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
// container and exit with its status.
func (r *runtime) runCmd(args []string) error {
	o, flags, err := parseCreate(args)
	if err != nil {
		return err
	}
	mon, err := r.createContainer(o)
	if err != nil {
		return err
	}
	if err := r.start([]string{o.id}); err != nil {
		mon.Process.Kill()
		mon.Wait()
		return err
	}
	if flags["detach"] || flags["d"] {
		return mon.Process.Release()
	}
	// runc run forwards the signals it gets to the container: the monitor
	// forwards them on to the container's init.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, unix.SIGTERM, unix.SIGINT, unix.SIGHUP, unix.SIGQUIT, unix.SIGUSR1, unix.SIGUSR2)
	go func() {
		for sig := range sigs {
			mon.Process.Signal(sig)
		}
	}()
	err = mon.Wait()
	signal.Stop(sigs)
	close(sigs)
	if !flags["keep"] {
		r.remove(o.id)
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		ws := ee.Sys().(syscall.WaitStatus)
		if ws.Signaled() {
			return exitCode(128 + int(ws.Signal()))
		}
		return exitCode(ws.ExitStatus())
	}
	if err != nil {
		return err
	}
	return nil
}
