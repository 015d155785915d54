package container

import (
	"fmt"
	"regexp"

	"github.com/moat-sandbox/moat/executor"
)

// Cause is a known reason why a CLI could not start a container on this
// host.
type Cause string

// The causes the provider recognises in the CLI's stderr.
const (
	// CauseHybridCgroups: crun refuses a host with cgroup v1 controllers and
	// a cgroup2 mount at once ("cgroups in hybrid mode not supported").
	CauseHybridCgroups Cause = "hybrid-cgroups"
	// CauseUlimits: the CLI's default ulimits (podman: nofile 1048576)
	// exceed the host's hard limits, which the OCI runtime cannot raise
	// ("error setting rlimit", "setrlimit `RLIMIT_NOFILE`").
	CauseUlimits Cause = "ulimits"
)

// StartError is a container that the CLI could not start, for a cause the
// provider recognised; its message names the cause and the fix.
type StartError struct {
	CLI    string
	Cause  Cause
	Detail string // the CLI's own line
}

func (e *StartError) Error() string {
	var why string
	switch e.Cause {
	case CauseHybridCgroups:
		why = "the OCI runtime refuses this host's hybrid cgroup layout (crun supports pure cgroup v1 or v2 only); " +
			"fix: choose runc with container.WithRuntime(\"runc\")"
	case CauseUlimits:
		why = "the CLI's default ulimits exceed the hard limits its OCI runtime runs with, which it cannot raise; " +
			"fix: pass lower limits with container.WithUlimits, for example container.WithUlimits(\"nofile=1024:1024\", \"nproc=4096:4096\")"
	default:
		why = string(e.Cause)
	}
	return fmt.Sprintf("%s could not start the container: %s (%s said: %s)", e.CLI, why, e.CLI, e.Detail)
}

// startFailures maps the CLI's (or its OCI runtime's) stderr to a cause.
var startFailures = []struct {
	cause Cause
	re    *regexp.Regexp
}{
	{CauseHybridCgroups, regexp.MustCompile(`(?m)^.*cgroups in hybrid mode not supported.*$`)},
	{CauseUlimits, regexp.MustCompile("(?mi)^.*(error setting rlimit|setrlimit `?RLIMIT_).*$")},
}

// diagnose turns a CLI that failed to start the container into a setup
// error naming the cause and the fix. docker and podman exit 125 when they
// fail themselves and 126 when the OCI runtime cannot start the container;
// other statuses are the tool's own and stay plain exit errors.
func (s *settings) diagnose(req *executor.Request, st executor.ExitStatus, stderr []byte) *executor.Error {
	if !st.Exited() || (st.Code != 125 && st.Code != 126) {
		return nil
	}
	for _, f := range startFailures {
		if line := f.re.Find(stderr); line != nil {
			e := &StartError{CLI: s.cli, Cause: f.cause, Detail: string(line)}
			return &executor.Error{
				Code:    executor.CodeSetup,
				Message: fmt.Sprintf("container tool '%s' did not run: %v", req.Tool, e),
				Err:     e,
			}
		}
	}
	return nil
}
