package native_test

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/conformance"
	"github.com/moat-sandbox/moat/conformance/testenv"
	"github.com/moat-sandbox/moat/executor/native"
	"github.com/moat-sandbox/moat/nsexec"
	"github.com/moat-sandbox/moat/policies"
)

// In a user namespace where no user namespace can be made, the provider
// falls to no-userns by itself: the posture names it, why and what it
// drops, with no namespace; a tool runs and its output and exit code
// come back; a policy that requires full mode (strict) is refused with a
// *native.ModeError. Below the rung's Landlock ABI (the VM's 2), New
// refuses the rung itself, with the *nsexec.LandlockABIError.
func TestNoUserNSMode(t *testing.T) {
	if testenv.InNoUserNS(t) {
		if !testenv.ReRun() && !t.Failed() && os.Geteuid() == 0 {
			testenv.RunAsUser(t, testenv.NobodyUID, testenv.NobodyGID)
		}
		return
	}
	if abi := nsexec.LandlockABI(); abi < nsexec.NoUserNSMinABI {
		_, err := native.New(native.WithoutCgroups())
		var le *nsexec.LandlockABIError
		var me *native.ModeError
		if !errors.As(err, &me) || me.Mode != nsexec.ModeNoUserNS || !errors.As(err, &le) || le.Have != abi {
			t.Fatalf("Landlock ABI %d: New = %v, want a *native.ModeError with the *nsexec.LandlockABIError", abi, err)
		}
		return
	}
	p, err := native.New(native.WithoutCgroups())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	n := p.Posture().Isolation.Native
	if n.Mode != string(nsexec.ModeNoUserNS) || n.ModeReason == "" || len(n.ModeDrops) == 0 || len(n.Namespaces) != 0 || n.Landlock < nsexec.NoUserNSMinABI {
		t.Fatalf("posture: mode %q (%q), drops %q, namespaces %q, landlock %d", n.Mode, n.ModeReason, n.ModeDrops, n.Namespaces, n.Landlock)
	}
	out, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	st, err := p.Run(context.Background(), &native.Command{Args: []string{"/bin/sh", "-c", `echo hi > "$HOME/x" && cat "$HOME/x" && ! cat /etc/shadow 2>/dev/null && exit 3`},
		Env: []string{"PATH=/usr/bin:/bin", "HOME=/work"}, Stdout: out})
	b, _ := os.ReadFile(out.Name())
	if err != nil || st.Code != 3 || strings.TrimSpace(string(b)) != "hi" {
		t.Fatalf("a tool in no-userns: %+v, %v, stdout %q", st, err, b)
	}
	strict, err := policies.Builtin("strict")
	if err != nil {
		t.Fatal(err)
	}
	_, err = native.New(native.WithPolicy(strict), native.WithoutCgroups())
	var me *native.ModeError
	if !errors.As(err, &me) || me.Required != nsexec.ModeFull || me.Mode != nsexec.ModeNoUserNS || !strings.Contains(err.Error(), "no-userns") {
		t.Fatalf("strict in no-userns: %v, want a *native.ModeError naming full and no-userns", err)
	}
}

// The kit's claim for the no-userns rung passes in it, as root and as
// nobody: every check but i5 (the host's processes are seen) and i8 (the
// tool's files are the launcher's).
func TestConformanceNoUserNS(t *testing.T) {
	if testenv.InNoUserNS(t) {
		if !testenv.ReRun() && !t.Failed() && os.Geteuid() == 0 {
			testenv.RunAsUser(t, testenv.NobodyUID, testenv.NobodyGID)
		}
		return
	}
	if abi := nsexec.LandlockABI(); abi < nsexec.NoUserNSMinABI {
		// The VM's ABI 2: the rung, and so the kit in it, is refused.
		var le *nsexec.LandlockABIError
		if _, err := native.New(native.WithoutCgroups()); !errors.As(err, &le) || le.Have != abi {
			t.Fatalf("Landlock ABI %d: the provider = %v, want the *nsexec.LandlockABIError", abi, err)
		}
		return
	}
	claim := conformance.ModeIsolation(string(nsexec.ModeNoUserNS))
	if nsexec.LandlockABI() < 6 {
		claim.Network = false // the host's abstract sockets are scoped from ABI 6 only
	}
	conformance.Run(t, newProvider, conformance.WithIsolation(claim))
}

// Below the rung's Landlock ABI, raised here to one above this kernel's
// as the VM's ABI 2 is for real, New refuses it: a *native.ModeError
// wrapping the *nsexec.LandlockABIError, naming both ABIs.
func TestNoUserNSModeBelowLandlockABI(t *testing.T) {
	if testenv.InNoUserNS(t) {
		return
	}
	defer func(v int) { nsexec.NoUserNSMinABI = v }(nsexec.NoUserNSMinABI)
	nsexec.NoUserNSMinABI = nsexec.LandlockABI() + 1
	_, err := native.New(native.WithoutCgroups())
	var le *nsexec.LandlockABIError
	var me *native.ModeError
	if !errors.As(err, &me) || me.Mode != nsexec.ModeNoUserNS || !errors.As(err, &le) || le.Need != nsexec.NoUserNSMinABI ||
		!strings.Contains(err.Error(), "ABI "+strconv.Itoa(le.Need)) || !strings.Contains(err.Error(), "ABI "+strconv.Itoa(le.Have)) {
		t.Fatalf("New = %v, want a *native.ModeError with the *nsexec.LandlockABIError naming both ABIs", err)
	}
}

// WithMode(no-userns) is a choice on a host that allows more: the
// sandboxes run in the rung, from a warm pool too, and (as root) in a
// cgroup leaf each.
func TestNoUserNSModeChosenAndPooled(t *testing.T) {
	if abi := nsexec.LandlockABI(); abi < nsexec.NoUserNSMinABI {
		if _, err := native.New(native.WithMode(nsexec.ModeNoUserNS), native.WithoutCgroups()); err == nil {
			t.Fatalf("Landlock ABI %d: WithMode(no-userns) was not refused", abi)
		}
		return
	}
	opts := []native.Option{native.WithMode(nsexec.ModeNoUserNS), native.WithPool(2)}
	if os.Geteuid() != 0 {
		opts = append(opts, native.WithoutCgroups())
	}
	p, err := native.New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if n := p.Posture().Isolation.Native; n.Mode != string(nsexec.ModeNoUserNS) || n.ModeReason == "" {
		t.Fatalf("posture mode %q (%q)", n.Mode, n.ModeReason)
	}
	for i := range 3 {
		st, err := p.Run(context.Background(), &native.Command{Args: []string{"/bin/sh", "-c", `[ "$PWD" != /work ] && echo ok > "$PWD/x" && [ "$(cat x)" = ok ] && [ -d "$TMPDIR" ] && ! ls /root 2>/dev/null`},
			Env: []string{"PATH=/usr/bin:/bin"}})
		if err != nil || st.Code != 0 {
			t.Fatalf("dispatch %d in no-userns from the pool: exit %+v, %v", i, st, err)
		}
	}
}
