// Package native is moat's own sandbox provider: every tool call runs in
// fresh user, mount, pid, net, ipc and uts namespaces on a read-only root,
// under the policy's seccomp filter and cgroup limits, as an unprivileged id
// with no capabilities, on the shared dispatch pipeline of package executor.
//
// The embedding program must call nsexec.Init() first in main (and test
// packages in TestMain), because the sandbox init is a re-exec of the
// running binary (or of WithInitPath's).
package native

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/moat-sandbox/moat/cgroups"
	"github.com/moat-sandbox/moat/executor"
	"github.com/moat-sandbox/moat/executor/egress"
	"github.com/moat-sandbox/moat/nsexec"
	"github.com/moat-sandbox/moat/policies"
	"github.com/moat-sandbox/moat/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// Provider is the native sandbox executor.
type Provider struct {
	pipeline *executor.Pipeline
	launcher *launcher
	native   *executor.NativeIsolation
}

// Option configures a Provider.
type Option func(*options)

type options struct {
	policy     *policies.Policy
	pipeline   executor.Config
	timeoutSet bool
	capSet     bool
	binds      []specs.Mount
	nsexec     []nsexec.Option
	cgroups    *cgroups.Manager
	noCgroups  bool
	hostID     *nsexec.Identity
	hostIDs    *executor.HostIDRange
	onUsage    func(*executor.Request, cgroups.Usage)
	logger     *slog.Logger
	poolSize   int
	poolIdle   time.Duration
	store      *seccomp.Store
	systemdBus string
	egress     *egress.Proxy
	onEgress   func(*executor.Request, egress.Usage)
	noLandlock bool
	mode       nsexec.Mode
	reuse      int // WithReuse
	onFallback func(executor.Posture)
}

// WithSeccompStore keeps the policy's compiled seccomp program in dir
// across processes (seccomp.Store says what makes a stored program
// trusted), so a short-lived process skips libseccomp's compile. It is
// used only when the provider runs as root, whose sandboxes run under
// another host uid and so can never read the store's MAC key, whatever
// they may write; rootless, a sandbox is the caller's own uid and could
// forge a program for a later run, so the option is then ignored and each
// process compiles (about 1.4 ms for the default policy). An empty dir
// turns it off.
func WithSeccompStore(dir string) Option {
	return func(o *options) {
		o.store = nil
		if dir != "" {
			o.store = &seccomp.Store{Dir: dir}
		}
	}
}

// WithoutLandlock leaves the sandboxes out of a Landlock domain. By
// default, on a kernel with Landlock ABI 2 or later (nsexec.LandlockABI;
// Linux 5.19: ABI 1 refuses every rename across directories), every sandbox's
// tool is in one that grants every filesystem right beneath its root and
// none elsewhere (nsexec.Config.Landlock), a second wall behind the mount
// namespace; the posture names its ABI.
func WithoutLandlock() Option { return func(o *options) { o.noLandlock = true } }

// WithPolicy sets the sandbox policy (default: the built-in "default").
func WithPolicy(p *policies.Policy) Option { return func(o *options) { o.policy = p } }

// WithTimeout overrides the policy's wall-clock limit (zero keeps the
// policy's, as leaving it out). A fraction of a millisecond runs and is
// attested as it is (timeoutMs 1500.5).
func WithTimeout(d time.Duration) Option {
	return func(o *options) { o.pipeline.Timeout, o.timeoutSet = d, d != 0 }
}

// WithKillGrace sets the SIGTERM to SIGKILL grace (default 2 s, when the
// option is left out). Zero sends SIGKILL right after the SIGTERM, as the
// reference's killGraceMs 0.
func WithKillGrace(d time.Duration) Option {
	return func(o *options) { o.pipeline.KillGrace, o.pipeline.KillGraceSet = d, true }
}

// WithMaxOutputBytes overrides the policy's per-stream output cap (zero
// keeps the policy's, as leaving it out).
func WithMaxOutputBytes(n int) Option {
	return func(o *options) { o.pipeline.MaxOutputBytes, o.capSet = n, n != 0 }
}

// WithWorkdirBase sets the host parent of the per-call workdirs.
func WithWorkdirBase(dir string) Option { return func(o *options) { o.pipeline.WorkdirBase = dir } }

// WithAllowEnv adds host variables to the policy's environment allowlist.
func WithAllowEnv(names ...string) Option {
	return func(o *options) { o.pipeline.AllowEnv = append(o.pipeline.AllowEnv, names...) }
}

// WithLookupEnv replaces os.LookupEnv as the source of allowlisted values.
func WithLookupEnv(f func(string) (string, bool)) Option {
	return func(o *options) { o.pipeline.LookupEnv = f }
}

// WithCredentials mints per-call environment variables.
func WithCredentials(f executor.CredentialsFunc) Option {
	return func(o *options) { o.pipeline.Credentials = f }
}

// WithLedger records every dispatch in l (two-phase when l has Intent).
func WithLedger(l executor.Ledger) Option { return func(o *options) { o.pipeline.Ledger = l } }

// WithCommand sets the fallback command (a path inside the sandbox, or a
// bare name looked up in the tool's PATH there) and the args prepended to
// the spec's args.
func WithCommand(command string, args ...string) Option {
	return func(o *options) { o.pipeline.Command, o.pipeline.Args = command, args }
}

// WithBinds adds bind mounts (Source on the host, Destination inside,
// Options "ro" or "rw") to the policy's.
func WithBinds(m ...specs.Mount) Option { return func(o *options) { o.binds = append(o.binds, m...) } }

// WithInitPath starts this binary as the sandbox init instead of the
// running one; its main must call nsexec.Init() first.
func WithInitPath(path string) Option {
	return func(o *options) { o.nsexec = append(o.nsexec, nsexec.WithInitPath(path)) }
}

// WithHostIdentity sets the host uid and gid every sandbox's id maps to
// when moat runs as root, so concurrent sandboxes share it (by default each
// gets one of its own, WithHostIDRange); rootless, the caller's own ids are
// the only ones that can be mapped.
func WithHostIdentity(id nsexec.Identity) Option {
	return func(o *options) {
		o.hostID = &id
		o.nsexec = append(o.nsexec, nsexec.WithIdentity(id))
	}
}

// WithHostIDRange sets the range each root-started sandbox gets a host uid
// and gid of its own from, and the root-only directory of their lock files
// (default nsexec.HostIDFirst, nsexec.HostIDCount, nsexec.HostIDLockDir;
// nsexec.WithHostIDRange).
func WithHostIDRange(dir string, first, count uint32) Option {
	return func(o *options) {
		o.hostIDs = &executor.HostIDRange{First: first, Count: count}
		o.nsexec = append(o.nsexec, nsexec.WithHostIDRange(dir, first, count))
	}
}

// WithNsexecOptions passes options to nsexec.Start (identity, handshake
// timeout).
func WithNsexecOptions(opts ...nsexec.Option) Option {
	return func(o *options) { o.nsexec = append(o.nsexec, opts...) }
}

// WithCgroups uses m for the per-dispatch limits instead of a manager the
// provider detects itself.
func WithCgroups(m *cgroups.Manager) Option { return func(o *options) { o.cgroups = m } }

// WithSystemdBus is the D-Bus address of the calling user's systemd
// manager ("unix:path=/run/user/1000/bus"): unprivileged on cgroup v2, when
// this process's cgroup is not delegated, the provider asks it for a
// transient scope with Delegate=yes, moves the whole process into it and
// creates every dispatch's leaf (its pool's too) below it
// (cgroups.WithSystemdBus). The library reads no environment: the caller
// passes what $DBUS_SESSION_BUS_ADDRESS or $XDG_RUNTIME_DIR/bus says. Used
// only when the provider finds its cgroup manager itself (not with
// WithCgroups or WithoutCgroups).
func WithSystemdBus(address string) Option { return func(o *options) { o.systemdBus = address } }

// WithoutCgroups runs without cgroup limits (rlimits and the wall-clock
// kill only); a policy that requires a cgroup limit then refuses.
func WithoutCgroups() Option { return func(o *options) { o.noCgroups = true } }

// WithUsage calls f after every dispatch that ran in a cgroup leaf, with
// what the cgroup measured: CPU time, memory peak, OOM kills, pids-limit
// hits.
func WithUsage(f func(*executor.Request, cgroups.Usage)) Option {
	return func(o *options) { o.onUsage = f }
}

// WithPool keeps up to size sandboxes of the provider's policy prepared
// ahead of time, waiting for their request (namespaces, mount tree, cgroup
// leaf and a fresh workdir ready), so a dispatch only hands one its tool,
// stdio and environment. Each serves exactly one dispatch and is destroyed
// after it, like a cold one; the pool refills in the background, empties
// after WithPoolIdleTimeout without dispatches, discards a sandbox prepared
// under host state that has changed since, and is drained by Close. A
// dispatch that finds it empty starts cold. Zero (the default) disables it.
func WithPool(size int) Option { return func(o *options) { o.poolSize = size } }

// WithPoolIdleTimeout sets how long pooled sandboxes wait without a
// dispatch before they are destroyed and the pool stops refilling, until
// the next dispatch (default DefaultPoolIdleTimeout).
func WithPoolIdleTimeout(d time.Duration) Option { return func(o *options) { o.poolIdle = d } }

// WithClock replaces time.Now for startedAt and durationMs.
func WithClock(now func() time.Time) Option { return func(o *options) { o.pipeline.Now = now } }

// WithLogger sets the logger for warnings (default: discarded).
func WithLogger(l *slog.Logger) Option {
	return func(o *options) { o.logger = l; o.pipeline.Logger = l }
}

// New builds a native provider: it resolves and validates the policy,
// compiles its seccomp filter once, and sets up the cgroup manager. A policy
// that requires a limit this host cannot enforce is refused here.
func New(opts ...Option) (*Provider, error) {
	o := options{}
	for _, opt := range opts {
		opt(&o)
	}
	if o.logger == nil {
		o.logger = slog.New(slog.DiscardHandler)
	}
	if o.policy == nil {
		p, err := policies.Builtin("default")
		if err != nil {
			return nil, fmt.Errorf("native: load the default policy: %w", err)
		}
		o.policy = p
	}
	// What a killed root process lent and could not give back; the
	// pipeline then sweeps the workdirs killed processes left.
	nsexec.SweepLent(o.logger, o.nsexec...)
	l, cfg, err := lower(&o)
	if err != nil {
		return nil, err
	}
	if o.poolSize < 0 {
		l.release()
		return nil, &executor.Error{Code: executor.CodeConfig, Message: fmt.Sprintf("native: pool size %d is negative", o.poolSize)}
	}
	p, err := executor.NewPipeline(cfg)
	if err != nil {
		l.release()
		return nil, err
	}
	if o.reuse < 0 || o.reuse > 1 {
		if err := checkReuse(&o, l); err != nil {
			l.release()
			return nil, err
		}
		l.reuse = o.reuse
	}
	if o.poolSize > 0 && l.egress != nil {
		// A pooled sandbox is prepared before its dispatch is known, and
		// its egress socket counts for the dispatch: start each cold.
		o.logger.Warn("warm pool not used: the policy has an egress section", "policy", o.policy.Name)
		o.poolSize = 0
	}
	if o.poolSize > 0 {
		rc := p.Config()
		l.pool = newPool(l, o.poolSize, o.poolIdle, rc.WorkdirBase, []string{rc.WorkdirPrefix, runWorkdirPrefix})
	}
	n := attest(l, o.policy, o.hostID, o.hostIDs)
	if l.reuse > 1 {
		n.Reuse = &executor.Reuse{Dispatches: l.reuse}
	}
	prov := &Provider{pipeline: p, launcher: l, native: n}
	if l.mode.provisional {
		l.fall = newModeFallback(&o, l)
		l.fall.posture = prov.Posture
	}
	return prov, nil
}

// Dispatch runs one tool call in a fresh sandbox.
func (p *Provider) Dispatch(ctx context.Context, req *executor.Request) (json.RawMessage, error) {
	return p.pipeline.Dispatch(ctx, req, p.launcher)
}

// Config returns the resolved pipeline configuration.
func (p *Provider) Config() executor.Config { return p.pipeline.Config() }

// Cgroups reports what the provider enforces through cgroups on this host.
func (p *Provider) Cgroups() cgroups.Posture { return p.launcher.cgPosture }

// Limits says how each memory, pids and cpu limit of the policy holds on
// this host: by the cgroup, by an rlimit standing in for it, or not at all.
func (p *Provider) Limits() []LimitState { return append([]LimitState(nil), p.launcher.limits...) }

// PoolStats reports what the warm pool did; the zero value without one.
func (p *Provider) PoolStats() PoolStats {
	if p.launcher.pool == nil {
		return PoolStats{}
	}
	return p.launcher.pool.snapshot()
}

// Close drains the warm pool and releases the provider's cgroup manager
// when it created it.
func (p *Provider) Close() error {
	if p.launcher.pool != nil {
		p.launcher.pool.close()
	}
	return p.launcher.release()
}

// release stops what the launcher started for itself: its egress proxy
// and its cgroup manager (New's error paths and Close).
func (l *launcher) release() error {
	if e := l.egress; e != nil && e.own {
		e.proxy.Close()
	}
	if l.ownCgroups && l.cgroups != nil {
		return l.cgroups.Close()
	}
	return nil
}
