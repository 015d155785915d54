package native

import (
	"fmt"
	"strings"

	"github.com/moat-sandbox/moat/nsexec"
	"github.com/moat-sandbox/moat/policies"
)

// WithMode runs the sandboxes in mode m, a rung no stronger than the one
// the host allows (nsexec.HostMode): a weaker one is a choice, a stronger
// one fails New. By default they run in the host's, the strongest there
// is here.
func WithMode(m nsexec.Mode) Option { return func(o *options) { o.mode = m } }

// ModeError is New's refusal of a policy whose requires.mode is stronger
// than the mode the sandboxes would run in: the run is refused, not
// degraded.
type ModeError struct {
	Policy   string      // the policy's name
	Required nsexec.Mode // its requires.mode ("" for WithMode's own ask)
	Mode     nsexec.Mode // what this host allows (or WithMode chose)
	Reason   string      // why the host allows no more
}

func (e *ModeError) Error() string {
	fix := "run moat where the kernel gives a sandbox a procfs: on the host, or in a container with an unmasked /proc " +
		"(--security-opt systempaths=unconfined; a pod's procMount: Unmasked)"
	if e.Required == "" {
		return fmt.Sprintf("native: mode %s was asked for, and this host allows %s: %s; %s", nsexec.ModeFull, e.Mode, e.Reason, fix)
	}
	return fmt.Sprintf("native: policy %q requires mode %s, and this host allows %s only (%s), which drops %s; %s, or use a policy that does not require mode %s",
		e.Policy, e.Required, e.Mode, e.Reason, strings.Join(e.Mode.Drops(), "; "), fix, e.Required)
}

// chooseMode is the mode the provider's sandboxes run in: the host's, or
// the weaker one WithMode asks, checked against the policy's requires.mode.
func chooseMode(o *options, pol *policies.Policy) (nsexec.Mode, string, error) {
	mode, why := hostMode()
	if o.mode != "" {
		if o.mode.Rank() < 0 {
			return "", "", fmt.Errorf("native: WithMode %q is not a mode; use one of %v", o.mode, nsexec.Modes)
		}
		if o.mode.Rank() < mode.Rank() {
			return "", "", &ModeError{Policy: pol.Name, Mode: mode, Reason: why}
		}
		if o.mode != mode {
			mode, why = o.mode, "chosen by the embedder (WithMode)"
		}
	}
	if pol.Requires != nil && pol.Requires.Mode != "" && mode.Rank() > policies.ModeRank(pol.Requires.Mode) {
		return "", "", &ModeError{Policy: pol.Name, Required: nsexec.Mode(pol.Requires.Mode), Mode: mode, Reason: why}
	}
	return mode, why, nil
}

// hostMode is nsexec.HostMode, a variable for the tests of a host that
// has only a weaker mode.
var hostMode = nsexec.HostMode
