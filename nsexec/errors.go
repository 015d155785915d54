package nsexec

import (
	"errors"
	"fmt"
	"strconv"
	"syscall"
)

// ErrNotWired means the child never said hello: the binary that was started
// (the running program, or the WithInitPath binary) does not call Init first
// in main (or in TestMain).
var ErrNotWired = errors.New("nsexec: the sandbox child did not answer the handshake; " +
	"call nsexec.Init() first in main (and in TestMain of every test package that starts sandboxes), " +
	"or point WithInitPath at a binary that does")

// ErrNested means Start was called in a sandbox child whose program never
// dispatched to Init; starting another sandbox from there would recurse.
var ErrNested = errors.New("nsexec: refusing to start a sandbox from an undispatched sandbox child " +
	"(the environment marker is set but nsexec.Init was never called in this process)")

// ErrUnsupported is returned on systems without the namespaces nsexec needs.
var ErrUnsupported = fmt.Errorf("nsexec: %w", errors.ErrUnsupported)

// ConfigError is a Config field that Start and Prepare refuse. Field is its
// JSON path in the Config ("mounts[1].options[0]").
type ConfigError struct {
	Field  string
	Value  string
	Reason string
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("nsexec config: %s %q: %s", e.Field, e.Value, e.Reason)
}

// Step names one step of the sandbox setup, for SetupError.
type Step int

// The steps, in the order the child runs them.
const (
	StepUnknown      Step = iota
	StepClone             // parent: clone with the namespace flags, id maps
	StepConfig            // child: read and check the Config
	StepCgroup            // child: join its cgroup v1 leaf
	StepCgroupNS          // child: unshare the cgroup namespace
	StepPropagation       // child: make / rprivate
	StepRootfs            // child: the new root (rootfs bind or tmpfs)
	StepBind              // child: clone a bind source
	StepMountTarget       // child: resolve a mount target beneath the new root
	StepMount             // child: attach a mount at its target
	StepEtc               // child: the minimal /etc of host mode
	StepProc              // child: fresh procfs and its masks
	StepDev               // child: minimal /dev
	StepTmp               // child: tmpfs /tmp
	StepIdentity          // child: groups, gid, uid
	StepPivot             // child: pivot_root and detach the old root
	StepRemountRoot       // child: root read-only
	StepHostname          // child: sethostname
	StepNetwork           // child: loopback
	StepCwd               // child: chdir /work and verify it
	StepRlimits           // child: RLIMIT_CORE and the configured rlimits
	StepCapabilities      // child: capability sets, bounding set, securebits
	StepNoNewPrivs        // child: PR_SET_NO_NEW_PRIVS
	StepFDs               // child: close-on-exec for every fd above 2
	StepSeccomp           // child: load the seccomp filter
	StepExec              // child: execve of the tool
	StepJoin              // parent: check and join another sandbox's namespaces
	StepSysctl            // child: the namespaced sysctls
	StepLandlock          // child: the Landlock domain (Config.Landlock)
)

var stepNames = [...]string{
	StepUnknown:      "unknown",
	StepClone:        "clone",
	StepConfig:       "config",
	StepCgroup:       "cgroup",
	StepCgroupNS:     "cgroupns",
	StepPropagation:  "propagation",
	StepRootfs:       "rootfs",
	StepBind:         "bind",
	StepMountTarget:  "mount-target",
	StepMount:        "mount",
	StepEtc:          "etc",
	StepProc:         "proc",
	StepDev:          "dev",
	StepTmp:          "tmp",
	StepIdentity:     "identity",
	StepPivot:        "pivot",
	StepRemountRoot:  "remount-root",
	StepHostname:     "hostname",
	StepNetwork:      "network",
	StepCwd:          "cwd",
	StepRlimits:      "rlimits",
	StepCapabilities: "capabilities",
	StepNoNewPrivs:   "no-new-privs",
	StepFDs:          "fds",
	StepSeccomp:      "seccomp",
	StepExec:         "exec",
	StepJoin:         "join",
	StepSysctl:       "sysctl",
	StepLandlock:     "landlock",
}

func (s Step) String() string {
	if s >= 0 && int(s) < len(stepNames) {
		return stepNames[s]
	}
	return fmt.Sprintf("step(%d)", int(s))
}

// SetupError is a sandbox setup failure: which step, on which path (when
// there is one), with the errno the kernel returned and a hint for the usual
// causes. errors.Is(err, unix.ENOENT) works on it.
type SetupError struct {
	Step   Step
	Path   string
	Errno  syscall.Errno // the same type as unix.Errno
	Detail string        // what the step was doing, when Path is not enough
	Hint   string
}

func (e *SetupError) Error() string {
	msg := "sandbox setup " + e.Step.String()
	if e.Path != "" {
		msg += " " + e.Path
	}
	if e.Detail != "" {
		msg += ": " + e.Detail
	}
	if e.Errno != 0 {
		msg += ": " + e.Errno.Error()
	}
	if e.Hint != "" {
		msg += " (" + e.Hint + ")"
	}
	return msg
}

// Unwrap returns the errno, so errors.Is(err, unix.EPERM) works.
func (e *SetupError) Unwrap() error {
	if e.Errno == 0 {
		return nil
	}
	return e.Errno
}

// stdioNames name descriptors 0, 1 and 2 for StdioError.
var stdioNames = [...]string{"stdin", "stdout", "stderr"}

// StdioError is a descriptor refused as the tool's stdin, stdout or stderr
// (CheckStdio): a directory, an O_PATH descriptor or a kernel-object handle
// would be a door from the sandbox to the host. Nothing was started.
type StdioError struct {
	FD   int    // 0, 1 or 2
	Kind string // "a directory", "an O_PATH descriptor", ...
	Err  error  // set when the descriptor could not even be inspected
}

func (e *StdioError) Error() string {
	name := "descriptor " + strconv.Itoa(e.FD)
	if e.FD >= 0 && e.FD < len(stdioNames) {
		name = stdioNames[e.FD] + " (descriptor " + strconv.Itoa(e.FD) + ")"
	}
	if e.Err != nil {
		return "sandbox stdio: inspect " + name + ": " + e.Err.Error()
	}
	return "sandbox stdio: " + name + " is " + e.Kind + ", which would let the tool reach host files " +
		"through /proc/self/fd/" + strconv.Itoa(e.FD) + "; pass a pipe, a regular file, a terminal, a socket or /dev/null"
}

func (e *StdioError) Unwrap() error { return e.Err }
