package native_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

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
