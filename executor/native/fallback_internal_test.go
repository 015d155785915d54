package native

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/moat-sandbox/moat/conformance/testenv"
	"github.com/moat-sandbox/moat/executor"
	"github.com/moat-sandbox/moat/nsexec"
	"golang.org/x/sys/unix"
)

// swap sets *v to x until the returned func puts the old value back.
func swap[T any](v *T, x T) func() {
	old := *v
	*v = x
	return func() { *v = old }
}

// startRecorder wraps startSandbox (or, with fail, replaces it) and
// records whether each start was asked for the no-userns rung.
type startRecorder struct {
	mu     sync.Mutex
	noUser []bool
	fail   func(cfg *nsexec.Config) error // nil: the real start
}

func (r *startRecorder) install(t *testing.T) {
	t.Cleanup(swap(&startSandbox, func(ctx context.Context, cfg *nsexec.Config, stdio nsexec.Stdio, opts ...nsexec.Option) (*nsexec.Process, error) {
		r.mu.Lock()
		r.noUser = append(r.noUser, cfg.NoUserNS)
		r.mu.Unlock()
		if r.fail != nil {
			return nil, r.fail(cfg)
		}
		return nsexec.Start(ctx, cfg, stdio, opts...)
	}))
}

func (r *startRecorder) starts() []bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]bool(nil), r.noUser...)
}

// provisional stubs a host where the mountinfo allows full and nothing
// seen without a clone refuses a user namespace (an LSM's refusal, a
// parent namespace's maximum): New starts in a provisional full mode.
func provisional(t *testing.T) {
	t.Cleanup(swap(&procMode, func() (nsexec.Mode, string) { return nsexec.ModeFull, "" }))
	t.Cleanup(swap(&userNSClear, func() bool { return true }))
}

// In a user namespace where max_user_namespaces is 0, with the sysctl
// unseen (as an LSM's refusal is), New starts in full mode, with no
// probe; the first clone is refused (ENOSPC), the provider falls to
// no-userns, says so once through WithModeFallback, and the tool runs on
// the retry, its exit code and output back; the posture then says the
// mode that ran and why, and the next dispatch starts in no-userns at
// once. Below the rung's Landlock ABI (the VM's 2) the run fails with
// the rung's own *ModeError and nothing is said.
func TestModeFallbackFromClone(t *testing.T) {
	if testenv.InNoUserNS(t) {
		if !testenv.ReRun() && !t.Failed() && os.Geteuid() == 0 {
			testenv.RunAsUser(t, testenv.NobodyUID, testenv.NobodyGID)
		}
		return
	}
	provisional(t)
	var rec startRecorder
	rec.install(t)
	var said []executor.Posture
	p, err := New(WithoutCgroups(), WithModeFallback(func(ps executor.Posture) { said = append(said, ps) }))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if n := p.Posture().Isolation.Native; n.Mode != string(nsexec.ModeFull) || !p.launcher.mode.provisional {
		t.Fatalf("before the first clone: mode %q, provisional %v", n.Mode, p.launcher.mode.provisional)
	}
	out, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	cmd := &Command{Args: []string{"/bin/sh", "-c", "echo hi; exit 3"}, Env: []string{"PATH=/usr/bin:/bin"}, Stdout: out}
	st, err := p.Run(context.Background(), cmd)
	if abi := nsexec.LandlockABI(); abi < nsexec.NoUserNSMinABI {
		var me *ModeError
		var le *nsexec.LandlockABIError
		if !errors.As(err, &me) || me.Mode != nsexec.ModeNoUserNS || !errors.As(err, &le) || len(said) != 0 {
			t.Fatalf("Landlock ABI %d: Run = %+v, %v, said %d; want the rung's *ModeError with the *nsexec.LandlockABIError", abi, st, err, len(said))
		}
		return
	}
	b, _ := os.ReadFile(out.Name())
	if err != nil || st.Code != 3 || strings.TrimSpace(string(b)) != "hi" {
		t.Fatalf("the retried run: %+v, %v, stdout %q", st, err, b)
	}
	if got := rec.starts(); len(got) != 2 || got[0] || !got[1] {
		t.Fatalf("starts (no-userns each): %v, want a full one refused, then one no-userns", got)
	}
	n := p.Posture().Isolation.Native
	if n.Mode != string(nsexec.ModeNoUserNS) || !strings.Contains(n.ModeReason, "max_user_namespaces") || len(n.ModeDrops) == 0 || len(n.Namespaces) != 0 {
		t.Fatalf("posture after the fall: mode %q (%q), drops %q, namespaces %q", n.Mode, n.ModeReason, n.ModeDrops, n.Namespaces)
	}
	if len(said) != 1 || said[0].Isolation.Native.Mode != string(nsexec.ModeNoUserNS) {
		t.Fatalf("WithModeFallback said %d postures, want one of no-userns", len(said))
	}
	if st, err := p.Run(context.Background(), &Command{Args: []string{"/bin/true"}}); err != nil || st.Code != 0 {
		t.Fatalf("the next run: %+v, %v", st, err)
	}
	if got := rec.starts(); len(got) != 3 || !got[2] || len(said) != 1 {
		t.Fatalf("starts %v, said %d: the next dispatch did not start in no-userns at once", got, len(said))
	}
}

// A clone that fails for a transient reason (EAGAIN, ENOMEM) drops no
// rung: the dispatch fails with the clone's own error, the posture stays
// full and the next dispatch tries full again. Nor does an EPERM that
// the probe does not confirm (a clone's id maps fail with it too). One
// the probe confirms falls, once, to a no-userns retry.
func TestModeFallbackNotOnTransient(t *testing.T) {
	if testenv.NoUserNSCopy() {
		return
	}
	provisional(t)
	errno := unix.EAGAIN
	rec := startRecorder{fail: func(*nsexec.Config) error {
		return &nsexec.SetupError{Step: nsexec.StepClone, Errno: errno, Detail: "spawn the sandbox init"}
	}}
	rec.install(t)
	probed := 0
	refused := false
	t.Cleanup(swap(&userNSRefused, func() (bool, string) {
		probed++
		return refused, "the test's refusal"
	}))
	said := 0
	p, err := New(WithoutCgroups(), WithModeFallback(func(executor.Posture) { said++ }))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	run := func() error {
		_, err := p.Run(context.Background(), &Command{Args: []string{"/bin/true"}})
		return err
	}
	for _, e := range []unix.Errno{unix.EAGAIN, unix.ENOMEM, unix.EPERM} {
		errno = e
		var se *nsexec.SetupError
		if err := run(); !errors.As(err, &se) || se.Errno != e {
			t.Fatalf("%v: Run = %v, want the clone's own error", e, err)
		}
		if n := p.Posture().Isolation.Native; n.Mode != string(nsexec.ModeFull) || p.launcher.fall.current() != nil || said != 0 {
			t.Fatalf("%v dropped a rung: mode %q, said %d", e, n.Mode, said)
		}
	}
	if got := rec.starts(); len(got) != 3 || got[0] || got[1] || got[2] || probed != 1 {
		t.Fatalf("starts %v, probes %d: want three in full and the probe asked for the EPERM only", got, probed)
	}
	refused = true
	err = run()
	if got := rec.starts(); len(got) != 5 || got[3] || !got[4] {
		// Below the rung's Landlock ABI there is no retry: its *ModeError.
		var le *nsexec.LandlockABIError
		if nsexec.LandlockABI() >= nsexec.NoUserNSMinABI || len(got) != 4 || !errors.As(err, &le) {
			t.Fatalf("a confirmed EPERM: starts %v, %v; want a full one, then one no-userns", got, err)
		}
		return
	}
	if n := p.Posture().Isolation.Native; n.Mode != string(nsexec.ModeNoUserNS) || n.ModeReason != "the test's refusal" || said != 1 {
		t.Fatalf("after a confirmed EPERM: mode %q (%q), said %d", n.Mode, n.ModeReason, said)
	}
}
