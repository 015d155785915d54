package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/moat-sandbox/moat/nsexec"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// runc's words for what engines branch on, which they read from the
// runtime's output (containerd's go-runc appends it to the error). In
// containerd 1.6's runc shim (pkg/process/utils.go checkKillError), a
// kill's "container not running" means the process already finished
// (errdefs.ErrNotFound, which StopPodSandbox takes as done) and "does not
// exist" means no such container; a delete's "does not exist" is ignored
// (pkg/process/init.go delete). CRI-O (internal/oci runtimeCmd) reads
// "container not running" as not found too. Other words are "unknown error
// after kill": containerd retries StopPodSandbox until its deadline, and
// the pod stays Ready. Each message below carries runc's substring
// (libcontainer/error.go; start.go, exec.go and delete.go of runc's CLI);
// TestRuncWording checks them all.
var errNotRunning = errors.New("container not running")

// startRefusal is start's error for a container that is not created.
func startRefusal(status specs.ContainerState) error {
	switch status {
	case specs.StateStopped:
		return errors.New("cannot start a container that has stopped")
	case specs.StateRunning:
		return errors.New("cannot start an already running container")
	}
	return fmt.Errorf("cannot start a container in the %s state", status)
}

// execRefusal is exec's error for a container that is not running.
func execRefusal(status specs.ContainerState) error {
	switch status {
	case specs.StateStopped:
		return errors.New("cannot exec in a stopped container")
	case statePaused:
		// runc's words without its --ignore-paused: an exec'd process
		// is forked by the container's init, which the freezer holds.
		return errors.New("cannot exec in a paused container (resume it first)")
	}
	return fmt.Errorf("cannot exec in a %s container: only a running one has a process to exec beside (start it first)", status)
}

// deleteRefusal is delete's error, without --force, for a container that
// is not stopped.
func deleteRefusal(id string, status specs.ContainerState) error {
	return fmt.Errorf("cannot delete container %s that is not stopped: %s (kill it first, or use --force)", id, status)
}

// ExecError is a process that cannot be exec'd, in runc's words: runc's
// init resolves process.args[0] with Go's exec.LookPath before it tells
// create it is ready (libcontainer/standard_init_linux.go), so create fails
// with "unable to start container process: exec: "NAME": WHY". Engines
// read WHY: podman (libpod getOCIRuntimeError) turns "executable file not
// found" and "no such file or directory" into exit 127, "permission
// denied" into 126, as a shell does; Docker over containerd does the same.
type ExecError struct {
	Name string
	Err  *nsexec.SetupError
}

func (e *ExecError) Error() string {
	why := e.Err.Errno.Error()
	switch {
	case e.Err.Errno == unix.ENOENT && !strings.Contains(e.Name, "/"):
		why = "executable file not found in $PATH"
	case e.Err.Errno == unix.ENOENT:
		why = "stat " + e.Name + ": no such file or directory"
	case e.Err.Errno == unix.EACCES:
		why = "permission denied"
	case e.Err.Errno == unix.EISDIR:
		why = "is a directory"
	}
	return fmt.Sprintf("unable to start container process: exec: %q: %s", e.Name, why)
}

func (e *ExecError) Unwrap() error { return e.Err }

// execFailure is err as an *ExecError when it is the sandbox's report of
// a process it could not resolve or exec, else nil.
func execFailure(err error) error {
	var se *nsexec.SetupError
	if !errors.As(err, &se) || se.Step != nsexec.StepExec || se.Path == "" || se.Detail != "" {
		return nil
	}
	return &ExecError{Name: se.Path, Err: se}
}
