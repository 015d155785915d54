package nsexec

import (
	"strings"

	"github.com/moat-sandbox/moat/seccomp"
	"golang.org/x/sys/unix"
)

// defaultPath is searched when the tool's environment has no PATH.
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// exec starts the tool from the locked thread: privileges dropped on every
// thread of the init, descriptors above 2 close-on-exec, seccomp installed
// last (on every thread too), then the fork and exec of the tool, which the
// init supervises as pid 1 (pid1_linux.go). It returns only on failure.
func (c *child) exec() error {
	if c.tail {
		return c.execTail()
	}
	cfg := c.cfg
	if cfg.NoUserNS {
		if c.workdirFD >= 0 {
			p, err := c.workdirPath()
			if err != nil {
				return err
			}
			cfg.Workdir = p
		}
		cfg.Env = noUserNSEnv(cfg.Env, cfg.Workdir, c.tmpDir)
	}
	path, err := lookPath(cfg.Args[0], cfg.Env)
	if err != nil {
		return stepErr(StepExec, cfg.Args[0], "", err)
	}
	var prog seccomp.Program
	if len(cfg.Seccomp) > 0 {
		if prog, err = seccomp.ParseProgram(cfg.Seccomp); err != nil {
			return stepErr(StepSeccomp, "", err.Error(), unix.EINVAL)
		}
	}
	// Every thread of the init, not this one alone (threads_linux.go).
	// After the signal subscription: the broadcast borrows a signal's
	// handler, which os/signal must not be installing meanwhile.
	<-c.subscribed
	drop := c.dropEveryThread
	if cfg.NoUserNS {
		drop = c.noUserNSDrop
	}
	if err := drop(); err != nil {
		return err
	}
	// Every inherited or internal descriptor above stdio, the sync socket
	// included, closes at exec (close_range(2) CLOSE_RANGE_CLOEXEC; the
	// CVE-2024-21626 lesson). The sync socket stays usable for a report if
	// the exec fails.
	if err := unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err != nil {
		return stepErr(StepFDs, "", "close_range", err)
	}
	c.mark(markPrivileges)
	// The Landlock domain just before the filter, on this thread, which
	// forks the tool (landlock_linux.go).
	if cfg.NoUserNS {
		// The rung's wall and its own filter, before the policy's (which
		// may refuse seccomp(2) itself).
		if err := c.restrictNoUserNS(c.tmpDir); err != nil {
			return err
		}
		own, _ := noUserNSFilter(cfg.EgressTCP != 0) // normalize checked there is one
		if err := seccomp.Load(own); err != nil {
			return stepErr(StepSeccomp, "", "the "+string(ModeNoUserNS)+" filter", err)
		}
	} else if err := c.restrictLandlock(-1); err != nil {
		return err
	}
	// Last: once the filter is in place, the init only forks and execs the
	// tool, forwards signals, reaps and reports, all under the filter.
	if prog != nil {
		if err := seccomp.Load(prog); err != nil {
			return stepErr(StepSeccomp, "", "", err)
		}
	}
	if c.trace {
		c.mark(markSeccomp)
		if err := writeMarks(c.sync, &c.marks); err != nil {
			return stepErr(StepExec, path, "trace", err)
		}
	}
	return c.startTool(path)
}

// checkTool resolves a prepared sandbox's tool as its exec will, in the
// new root and with the tool's identity (WithToolCheck), and checks that
// what it finds may be executed: a regular file with the execute
// permission for this identity (access(2) X_OK; what a noexec mount
// refuses shows only at the exec). Its errors are those of Go's
// exec.LookPath, which runc reports: ENOENT, EACCES, EISDIR.
func checkTool(name string, env []string) error {
	path, err := lookPath(name, env)
	if err == nil {
		var st unix.Stat_t
		switch err = unix.Stat(path, &st); {
		case err != nil:
		case st.Mode&unix.S_IFMT == unix.S_IFDIR:
			err = unix.EISDIR
		case st.Mode&unix.S_IFMT != unix.S_IFREG:
			err = unix.EACCES
		default:
			err = unix.Access(path, unix.X_OK)
		}
	}
	if err != nil {
		return stepErr(StepExec, name, "", err)
	}
	return nil
}

// lookPath resolves a bare tool name against the PATH of the tool's
// environment inside the new root, as execvp(3) would.
func lookPath(name string, env []string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	path := defaultPath
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	denied := false
	for _, dir := range strings.Split(path, ":") {
		if dir == "" {
			dir = "."
		}
		p := dir + "/" + name
		var st unix.Stat_t
		if unix.Stat(p, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
			continue
		}
		if unix.Access(p, unix.X_OK) != nil {
			denied = true
			continue
		}
		return p, nil
	}
	if denied {
		return "", unix.EACCES
	}
	return "", unix.ENOENT
}
