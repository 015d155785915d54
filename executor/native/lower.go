package native

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"strconv"
	"strings"

	"github.com/moat-sandbox/moat/cgroups"
	"github.com/moat-sandbox/moat/executor"
	"github.com/moat-sandbox/moat/nsexec"
	"github.com/moat-sandbox/moat/policies"
	"github.com/moat-sandbox/moat/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// programs compiles each distinct seccomp profile once per process.
var programs seccomp.Cache

// lower is the one place where a policy becomes what the sandbox runs
// with: the nsexec.Config template, the cgroup resources and the pipeline
// configuration.
func lower(o *options) (*launcher, executor.Config, error) {
	pol := o.policy
	// Validate judges the filter of a policy that extends nothing; this
	// one runs as it is, so no filter without the statement, whatever it
	// extends.
	err := pol.Validate()
	if err == nil {
		err = pol.CheckFilter()
	}
	if err != nil {
		return nil, executor.Config{}, &executor.Error{Code: executor.CodeConfig, Err: err,
			Message: fmt.Sprintf("native: policy %q: %v", pol.Name, err)}
	}
	cfg := o.pipeline
	cfg.Name = "native"
	cfg.WorkdirPrefix = "rulvar-exec-"
	cfg.ResolveCommand = false // the command is resolved inside the sandbox
	cfg.AllowEnv = append(append([]string(nil), pol.Env...), cfg.AllowEnv...)
	if !o.timeoutSet {
		d, err := pol.Limits.Timeout.Duration()
		if err != nil {
			return nil, cfg, fmt.Errorf("native: policy %q: limits.timeout: %w", pol.Name, err)
		}
		if d == 0 && pol.Limits.Timeout != "" {
			// Written, not left out: the reference would keep a zero
			// timeoutMs (and kill every tool at once), the pipeline would
			// read it as unset and run 30 s. Neither is what was written.
			return nil, cfg, &executor.Error{Code: executor.CodeConfig, Message: fmt.Sprintf(
				"native: policy %q: limits.timeout %q is zero, which would kill every tool at once; leave it out for the default (30s) or give a positive duration", pol.Name, string(pol.Limits.Timeout))}
		}
		cfg.Timeout = d
	}
	if !o.capSet {
		n, err := pol.Limits.OutputCap.Bytes()
		if err != nil {
			return nil, cfg, fmt.Errorf("native: policy %q: limits.outputCap: %w", pol.Name, err)
		}
		if n > math.MaxInt32 {
			n = math.MaxInt32
		}
		cfg.MaxOutputBytes = int(n)
	}

	tmp, err := pol.Limits.TmpfsSize.Bytes()
	if err != nil {
		return nil, cfg, fmt.Errorf("native: policy %q: limits.tmpfsSize: %w", pol.Name, err)
	}
	mode, err := chooseMode(o, pol)
	if err != nil {
		return nil, cfg, err
	}
	tmpl := nsexec.Config{
		Mounts:  append(lowerMounts(pol.Mounts), o.binds...),
		Network: pol.Network,
		TmpSize: tmp,
		Rlimits: pol.Rlimits,
	}
	lowerMode(&tmpl, o, mode)
	if pol.Rootfs != "" && pol.Rootfs != policies.RootfsHost {
		tmpl.Rootfs = pol.Rootfs
	}
	if pol.Identity != nil {
		tmpl.UID, tmpl.GID = pol.Identity.UID, pol.Identity.GID
	}
	if o.store != nil && os.Geteuid() != 0 {
		// A rootless sandbox runs as our own uid: it could read the store's
		// key through a bind and forge what a later run loads.
		o.logger.Debug("seccomp program store not used: rootless, a sandbox could read its key", "store", o.store.Dir)
		o.store = nil
	}
	if pol.Seccomp != nil {
		// Fail closed: a policy that asks for seccomp never runs without it.
		prog, err := compileSeccomp(o, pol.Seccomp)
		if err != nil {
			return nil, cfg, &executor.Error{Code: executor.CodeConfig, Err: err,
				Message: fmt.Sprintf("native: policy %q asks for a seccomp filter that cannot be built here: %v", pol.Name, err)}
		}
		if tmpl.Seccomp, err = prog.MarshalBinary(); err != nil {
			return nil, cfg, err
		}
	}

	route, err := lowerEgress(o, pol, &tmpl)
	if err != nil {
		return nil, cfg, err
	}
	ok := false
	defer func() {
		if !ok && route != nil && route.own {
			// A proxy this provider started is its to stop when New fails.
			route.proxy.Close()
		}
	}()
	// A read-only bind of the caller's private directory (an executor's
	// mkdtemp runner directory) is readable to the sandbox's own host id
	// through an id-mapped mount of its owner (nsexec.WithOwnerMappedBinds).
	nsopts := append([]nsexec.Option{nsexec.WithOwnerMappedBinds()}, o.nsexec...)
	l := &launcher{tmpl: tmpl, nsexec: nsopts, onUsage: o.onUsage, logger: o.logger, egress: route, mode: mode}
	res, err := resources(pol)
	if err != nil {
		return nil, cfg, err
	}
	l.resources = res
	if err := setupCgroups(l, o, pol); err != nil {
		return nil, cfg, err
	}
	// What no cgroup holds, an rlimit stands in for where one can
	// (standin.go); the template, and so its digest, carries it.
	if l.limits, l.tmpl.Rlimits, err = standIns(pol, l.cgroupHolds, hostHard, nprocPerUserNS()); err == nil {
		l.tmplDigest, err = digestTemplate(&l.tmpl)
	}
	if err != nil {
		if l.ownCgroups {
			l.cgroups.Close()
		}
		return nil, cfg, err
	}
	if text := unheld(l.limits); text != "" {
		// The why of each, and the fix, for `moat doctor` and the
		// machine-readable log formats.
		var attrs []any
		for _, s := range l.limits {
			if s.State != executor.LimitEnforced {
				attrs = append(attrs, s.Name, s.Reason)
			}
		}
		o.logger.Warn("limits without a cgroup here: "+text, append(attrs, "fix", l.cgPosture.Fix)...)
	}
	ok = true
	return l, cfg, nil
}

// cgroupHolds reports whether the dispatch's cgroup leaf holds a limit,
// and if not why.
func (l *launcher) cgroupHolds(lim cgroups.Limit) (bool, string) {
	lp := l.cgPosture.Of(lim)
	return l.cgroups != nil && lp.Enforced, lp.Reason
}

// lowerMounts copies the policy's mounts for nsexec, whose tmpfs size= and
// nr_inodes= options are plain numbers: a validated policy's human sizes
// ("64M") become bytes. nsexec builds each mount as exactly what it says
// and caps a tmpfs without size= at the policy's limits.tmpfsSize.
func lowerMounts(ms []specs.Mount) []specs.Mount {
	out := make([]specs.Mount, 0, len(ms))
	for _, m := range ms {
		if m.Type == "tmpfs" {
			opts := make([]string, len(m.Options))
			for i, o := range m.Options {
				opts[i] = o
				if key, val, ok := strings.Cut(o, "="); ok && (key == "size" || key == "nr_inodes") {
					if n, err := policies.Size(val).Bytes(); err == nil {
						opts[i] = key + "=" + strconv.FormatInt(n, 10)
					}
				}
			}
			m.Options = opts
		}
		out = append(out, m)
	}
	return out
}

// compileSeccomp compiles a profile once per process, or, with a store,
// once per store (a short-lived process reads what an earlier one left).
func compileSeccomp(o *options, profile *specs.LinuxSeccomp) (seccomp.Program, error) {
	if o.store == nil {
		return programs.Program(profile)
	}
	return o.store.Program(profile, func(err error) {
		// Someone else's or an altered file deserves a warning; a store
		// that cannot be created or written only costs time.
		var se *seccomp.StoreError
		if errors.As(err, &se) {
			o.logger.Warn("seccomp program store: compiled instead", "err", err)
		} else {
			o.logger.Debug("seccomp program store: compiled instead", "err", err)
		}
	})
}

// resources turns the policy's limits into OCI cgroup resources; nil when
// the policy sets none.
func resources(pol *policies.Policy) (*specs.LinuxResources, error) {
	mem, err := pol.Limits.Memory.Bytes()
	if err != nil {
		return nil, fmt.Errorf("native: policy %q: limits.memory: %w", pol.Name, err)
	}
	if mem == 0 && pol.Limits.Pids == 0 && pol.Limits.CPUs == 0 {
		return nil, nil
	}
	res := &specs.LinuxResources{}
	if mem > 0 {
		res.Memory = &specs.LinuxMemory{Limit: &mem}
	}
	if pol.Limits.Pids > 0 {
		pids := pol.Limits.Pids
		res.Pids = &specs.LinuxPids{Limit: &pids}
	}
	if pol.Limits.CPUs > 0 {
		period := uint64(100000)
		quota := int64(pol.Limits.CPUs * float64(period))
		res.CPU = &specs.LinuxCPU{Period: &period, Quota: &quota}
	}
	return res, nil
}

// setupCgroups finds the cgroup manager and refuses a policy whose required
// limits this host cannot enforce.
func setupCgroups(l *launcher, o *options, pol *policies.Policy) error {
	switch {
	case o.noCgroups:
		l.cgPosture = cgroups.Posture{Memory: off("disabled by WithoutCgroups"), Pids: off("disabled by WithoutCgroups"), CPU: off("disabled by WithoutCgroups"),
			Source: cgroups.SourceNone, SourceDetail: "disabled by WithoutCgroups"}
	case o.cgroups != nil:
		l.cgroups = o.cgroups
		l.cgPosture = o.cgroups.Posture()
	default:
		m, err := defaultCgroups(o.logger, o.systemdBus)
		if err != nil {
			l.cgPosture = cgroups.Posture{Memory: off(err.Error()), Pids: off(err.Error()), CPU: off(err.Error()),
				Source: cgroups.SourceNone, SourceDetail: err.Error()}
		} else {
			l.cgroups, l.ownCgroups = m, true
			l.cgPosture = m.Posture()
			if err := m.CleanStale(); err != nil {
				o.logger.Warn("remove stale cgroups", "err", err)
			}
		}
	}
	var required []cgroups.Limit
	for _, name := range pol.Limits.Required {
		switch name {
		case "memory":
			required = append(required, cgroups.Memory)
		case "pids":
			required = append(required, cgroups.Pids)
		case "cpus":
			required = append(required, cgroups.CPU)
		}
	}
	if err := l.cgPosture.Require(required...); err != nil {
		if l.ownCgroups {
			l.cgroups.Close() // nothing will run: give back what New took
		}
		return &executor.Error{Code: executor.CodeConfig, Err: err,
			Message: fmt.Sprintf("native: policy %q requires limits this host cannot enforce: %v", pol.Name, err)}
	}
	// Only limits nobody required reach here: they degrade, to an rlimit
	// where one stands in, with a warning (lower).
	return nil
}

// defaultCgroups finds where this process may create per-dispatch leaves.
// The first choice nests them under this process's own cgroup, so limits on
// moat bind its sandboxes too. On a cgroup v2 host that fails for root in a
// group that holds processes (the "no internal processes" rule: controllers
// cannot be enabled below it), and the hierarchy root, which is exempt, is
// the way out (cgroups.WithParent doc; Documentation/admin-guide/cgroup-v2.rst).
//
// Rootless, a bus lets the manager ask the user's systemd for a delegated
// scope. As root moat does not go through the system bus (runc's systemd
// driver does): root can create its parent below the hierarchy root itself,
// with no dependency on a D-Bus daemon being up, in containers and early
// boot alike, at the cost of systemd not knowing the group (it leaves
// groups it did not create alone).
func defaultCgroups(log *slog.Logger, bus string) (*cgroups.Manager, error) {
	m, err := cgroups.New(cgroups.WithLogger(log), cgroups.WithSystemdBus(bus))
	if err != nil || !m.Posture().Degraded() || m.Posture().Layout != cgroups.Unified || os.Geteuid() != 0 {
		return m, err
	}
	root, rerr := cgroups.New(cgroups.WithLogger(log), cgroups.WithParent("/moat"))
	if rerr != nil || root.Posture().Degraded() {
		if root != nil {
			root.Close()
		}
		return m, err
	}
	m.Close()
	return root, nil
}

func off(reason string) cgroups.LimitPosture { return cgroups.LimitPosture{Reason: reason} }
