package native

import (
	"sync"
	"sync/atomic"

	"github.com/moat-sandbox/moat/executor"
	"github.com/moat-sandbox/moat/nsexec"
	"github.com/moat-sandbox/moat/policies"
)

// WithModeFallback calls f once, with the provider's new posture, when
// its sandboxes fall from full mode to no-userns at the first clone the
// kernel refuses a user namespace (startMode says when that can happen),
// before the dispatch is retried in no-userns; moat run says the mode
// there as it would have after New. Never called where New decided the
// mode.
func WithModeFallback(f func(executor.Posture)) Option {
	return func(o *options) { o.onFallback = f }
}

// startMode is the rung New starts from, why, and whether it is
// provisional: chosen without making a user namespace, so that the
// sandbox's own clone is the signal (issue 33).
//
// What decides the mode, when:
//   - A provider that must know it before anything runs (a policy's
//     requires.mode, WithMode, egress and reuse, which no-userns refuses,
//     a warm pool, whose sandboxes are prepared in the background) asks
//     nsexec.HostMode: the sysctls that refuse a user namespace for
//     certain, else the probe that clones one, cheap where it is refused.
//   - Any other starts where the mountinfo allows full, and nothing seen
//     without a clone refuses a user namespace (nsexec.UserNSClear: two
//     sysctls and, under a seccomp filter, the unshare EINVAL trick), in a
//     provisional full mode: the common host pays no probe. Its first
//     cold clone that the kernel refuses (EPERM, ENOSPC, EUSERS:
//     nsexec.UserNSVerdict), confirmed by nsexec.UserNSRefused (a clone's
//     EPERM can also be its id maps'), lowers it to no-userns for good and
//     the dispatch is retried once (launcher.fallBack). A transient error
//     (EAGAIN, ENOMEM) lowers nothing.
//   - The mountinfo's no-proc is decided in New too (HostMode), so its
//     warning is said before a tool runs, whichever rung it ends on.
func startMode(o *options, pol *policies.Policy) (nsexec.Mode, string, bool) {
	mustKnow := o.mode != "" || (pol.Requires != nil && pol.Requires.Mode != "") || pol.Egress != nil ||
		o.reuse < 0 || o.reuse > 1 || o.poolSize != 0
	if !mustKnow {
		if m, why := procMode(); m == nsexec.ModeFull && userNSClear() {
			return m, why, true
		}
	}
	m, why := hostMode()
	return m, why, false
}

// modeFallback is a provisional launcher's way down to no-userns: built
// once, at the first refused clone, then used by every dispatch.
type modeFallback struct {
	mu      sync.Mutex
	fell    atomic.Pointer[fallen]
	build   func(why string) (*launcher, *executor.NativeIsolation, error)
	posture func() executor.Posture // the Provider's, set by New
	notice  func(executor.Posture)  // WithModeFallback
}

// fallen is the launcher a provisional one fell to, and its posture.
type fallen struct {
	l      *launcher
	native *executor.NativeIsolation
}

// newModeFallback is l's fallback to no-userns: the same provider but
// for the rung's choice, its config and posture.
func newModeFallback(o *options, l *launcher) *modeFallback {
	pol, hostID, hostIDs := o.policy, o.hostID, o.hostIDs
	noLandlock, mode := o.noLandlock, o.mode
	return &modeFallback{notice: o.onFallback, build: func(why string) (*launcher, *executor.NativeIsolation, error) {
		mo := &options{noLandlock: noLandlock, mode: mode}
		c, err := chooseFrom(mo, pol, nsexec.ModeNoUserNS, why)
		if err != nil {
			return nil, nil, err
		}
		nl := *l
		nl.fall, nl.mode = nil, c
		lowerMode(&nl.tmpl, mo, c)
		if nl.tmplDigest, err = digestTemplate(&nl.tmpl); err != nil {
			return nil, nil, err
		}
		return &nl, attest(&nl, pol, hostID, hostIDs), nil
	}}
}

// current is the launcher f fell to, nil before (or without a fallback).
func (f *modeFallback) current() *fallen {
	if f == nil {
		return nil
	}
	return f.fell.Load()
}

// fallBack is the launcher to retry a dispatch on after its cold start
// failed with err: the no-userns one, where err is the kernel's refusal
// of a user namespace and the probe agrees; nil to fail the dispatch
// with err. The error is the rung's own refusal (a Landlock ABI below
// its need): no sandbox can be made here.
func (l *launcher) fallBack(err error) (*launcher, error) {
	f := l.fall
	if f == nil {
		return nil, nil
	}
	if refused, _ := nsexec.UserNSVerdict(err); !refused {
		return nil, nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if x := f.fell.Load(); x != nil {
		return x.l, nil // a dispatch at the same time fell first
	}
	// Go's clone reports the parent's id-map writes and the child's
	// steps before exec with the clone's errno too: only a probe that
	// fails the same way says the kernel refused the namespace itself.
	refused, why := userNSRefused()
	if !refused {
		return nil, nil
	}
	nl, native, berr := f.build(why)
	if berr != nil {
		return nil, berr
	}
	f.fell.Store(&fallen{l: nl, native: native})
	l.logger.Debug("mode: the first clone was refused a user namespace; the sandboxes run in "+string(nsexec.ModeNoUserNS), "reason", why)
	if f.notice != nil && f.posture != nil {
		f.notice(f.posture())
	}
	return nl, nil
}

// nativeIsolation is the posture's native part: the fallen launcher's
// once the provider fell.
func (p *Provider) nativeIsolation() *executor.NativeIsolation {
	if f := p.launcher.fall.current(); f != nil {
		return f.native
	}
	return p.native
}
