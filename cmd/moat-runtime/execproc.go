package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"syscall"

	"github.com/moat-sandbox/moat/nsexec"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// execSession runs one exec for the connection c: the process's start, the
// client's signals for it, its end. The connection's EOF before the end
// kills the process: its waiter, which the engine takes for it, is gone.
func (m *monitor) execSession(c *net.UnixConn, lc *lineConn, r *execRequest, files []*os.File) {
	defer closeAll(files)
	if r == nil || len(files) != 3 {
		reply(c, errors.New("an exec request comes with its process and three stdio descriptors"))
		return
	}
	spec, err := m.execSpec(r)
	if err != nil {
		reply(c, err)
		return
	}
	m.mu.Lock()
	status := m.state.Status
	m.mu.Unlock()
	if status != specs.StateRunning {
		reply(c, execRefusal(status))
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), controlTimeout)
	e, err := m.sb.Exec(ctx, spec, nsexec.Stdio{Stdin: files[0], Stdout: files[1], Stderr: files[2]})
	cancel()
	closeAll(files)
	switch {
	case errors.Is(err, nsexec.ErrNotRunning):
		err = execRefusal(specs.StateCreated)
	case errors.Is(err, nsexec.ErrSandboxGone):
		err = execRefusal(specs.StateStopped)
	case err != nil:
		err = fmt.Errorf("exec %s: %w", spec.Args[0], err)
	}
	if err != nil {
		reply(c, err)
		return
	}
	m.log.Debug("exec", "args", spec.Args, "pid", e.Pid())
	if err := writeLine(c, ctlReply{OK: true, Pid: e.Pid()}); err != nil {
		e.Signal(unix.SIGKILL)
	}
	go func() {
		for {
			var req ctlRequest
			got, err := lc.readLine(&req)
			closeAll(got)
			if err != nil {
				select {
				case <-e.Done():
				default:
					m.log.Debug("the exec's waiter is gone: its process is killed", "pid", e.Pid())
					e.Signal(unix.SIGKILL)
				}
				return
			}
			if req.Op == "signal" && req.Signal >= 1 && req.Signal <= 64 {
				e.Signal(syscall.Signal(req.Signal))
			}
		}
	}()
	x := e.Wait()
	writeLine(c, ctlReply{OK: true, Exit: &exitStatus{Code: x.Code, Signal: int(x.Signal)}})
}

// beginSession counts a request in flight, unless the container has ended.
func (m *monitor) beginSession() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closing {
		return false
	}
	m.sessions++
	return true
}

func (m *monitor) endSession() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.sessions > 0 {
		m.sessions--
	}
	m.idle.Broadcast()
}

// execField is an exec'd process's field that moat does not grant, with
// why and what to do instead.
type execField struct {
	Field  string
	Reason string
}

func (e *execField) Error() string { return "exec: " + e.Field + ": " + e.Reason }

// execSpec builds the process of r by runc's rules (--process is the whole
// process; else the container's with the command, the environment added
// to its own, the cwd and the user the options give) and checks that it
// asks nothing the container's process does not have: the init forks it
// with the tool's credentials, so another uid, gid or group set, more
// capabilities, other rlimits or another OOM score would not be what it
// gets, and is refused, naming the field.
func (m *monitor) execSpec(r *execRequest) (nsexec.ExecSpec, error) {
	ctr := m.h.Process
	if ctr == nil {
		ctr = &specs.Process{}
	}
	var p specs.Process
	if r.Process != nil {
		p = *r.Process
	} else {
		p = *ctr
		p.Args = r.Args
		p.Env = append(slices.Clone(m.h.Env), r.Env...)
		if r.Cwd != "" {
			p.Cwd = r.Cwd
		}
		if r.User != nil {
			p.User = *r.User
		}
	}
	var errs []error
	bad := func(field, format string, a ...any) {
		errs = append(errs, &execField{Field: field, Reason: fmt.Sprintf(format, a...)})
	}
	if len(p.Args) == 0 || p.Args[0] == "" {
		bad("process.args", "name the program to run")
	}
	cwd := p.Cwd
	if cwd == "" {
		cwd = m.h.Cwd
	}
	if cwd == "" {
		cwd = "/"
	}
	if !filepath.IsAbs(cwd) || filepath.Clean(cwd) != cwd {
		bad("process.cwd", "%q: use an absolute, clean path", cwd)
	}
	noSwitch := "an exec'd process is forked by the container's init with the container's process's credentials, and the init switches no process to another user; exec as the container's user"
	if p.User.UID != ctr.User.UID || p.User.GID != ctr.User.GID {
		bad("process.user", "%d:%d is not the container's process's %d:%d, and %s", p.User.UID, p.User.GID, ctr.User.UID, ctr.User.GID, noSwitch)
	}
	if !sameSet(p.User.AdditionalGids, ctr.User.AdditionalGids) {
		bad("process.user.additionalGids", "%v is not the container's %v, and %s", p.User.AdditionalGids, ctr.User.AdditionalGids, noSwitch)
	}
	if p.User.Umask != nil && (ctr.User.Umask == nil || *p.User.Umask != *ctr.User.Umask) {
		bad("process.user.umask", "the process inherits the container's umask")
	}
	if p.Capabilities != nil {
		c := ctr.Capabilities
		if c == nil {
			c = &specs.LinuxCapabilities{}
		}
		for _, set := range []struct {
			name      string
			ask, have []string
		}{
			{"bounding", p.Capabilities.Bounding, c.Bounding}, {"effective", p.Capabilities.Effective, c.Effective},
			{"inheritable", p.Capabilities.Inheritable, c.Inheritable}, {"permitted", p.Capabilities.Permitted, c.Permitted},
			{"ambient", p.Capabilities.Ambient, c.Ambient},
		} {
			for i, cp := range set.ask {
				if !slices.Contains(set.have, cp) {
					bad(fmt.Sprintf("process.capabilities.%s[%d]", set.name, i), "%s is not in the container's %s set: an exec'd process gets at most the container's process's capabilities", cp, set.name)
				}
			}
		}
	}
	held, _ := nsexec.CapabilityBits(m.h.Caps)
	for _, cp := range r.Caps {
		if b, err := nsexec.CapabilityBits([]string{cp}); err != nil || b&^held != 0 {
			bad("--cap", "%s: the container's process does not hold it (it holds %v), and an exec'd process gets nothing more", cp, m.h.Caps)
		}
	}
	if p.ApparmorProfile != "" && p.ApparmorProfile != ctr.ApparmorProfile {
		bad("process.apparmorProfile", "moat confines with its user namespace and seccomp filter, not AppArmor")
	}
	if p.SelinuxLabel != "" && p.SelinuxLabel != ctr.SelinuxLabel {
		bad("process.selinuxLabel", "moat confines with its user namespace and seccomp filter, not SELinux")
	}
	if len(p.Rlimits) > 0 && !sameSet(p.Rlimits, ctr.Rlimits) {
		bad("process.rlimits", "the process inherits the container's rlimits; leave them out or give the container's")
	}
	if p.OOMScoreAdj != nil && (ctr.OOMScoreAdj == nil || *p.OOMScoreAdj != *ctr.OOMScoreAdj) {
		bad("process.oomScoreAdj", "the process inherits the container's OOM score")
	}
	if p.Scheduler != nil || p.IOPriority != nil || p.ExecCPUAffinity != nil {
		bad("process", "scheduler, ioPriority and execCPUAffinity are not supported for exec")
	}
	if err := errors.Join(errs...); err != nil {
		return nsexec.ExecSpec{}, err
	}
	return nsexec.ExecSpec{Args: p.Args, Env: p.Env, Cwd: cwd, UID: m.h.UID, GID: m.h.GID, Terminal: r.Terminal}, nil
}

// sameSet says whether a and b hold the same values, order aside.
func sameSet[T comparable](a, b []T) bool {
	for _, x := range a {
		if !slices.Contains(b, x) {
			return false
		}
	}
	for _, x := range b {
		if !slices.Contains(a, x) {
			return false
		}
	}
	return true
}
