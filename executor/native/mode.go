package native

import (
	"fmt"
	"strings"

	"github.com/moat-sandbox/moat/executor"
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
	Drops    []string    // what the sandboxes would lack of full mode
	// Err is why the mode itself cannot run here, when it cannot: the
	// no-userns rung's *nsexec.LandlockABIError.
	Err error
}

// Unwrap is Err.
func (e *ModeError) Unwrap() error { return e.Err }

func (e *ModeError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("native: no sandbox can be made here: %s; mode %s cannot run either: %v", e.Reason, e.Mode, e.Err)
	}
	if e.Mode == nsexec.ModeNoUserNS && e.Required != "" {
		return fmt.Sprintf("native: policy %q requires mode %s, and this host allows %s (%s), which drops %s; run moat where user namespaces are allowed (outside the sandbox or container, or under a profile that allows them), or use a policy that does not require mode %s",
			e.Policy, e.Required, e.Mode, e.Reason, strings.Join(e.Drops, "; "), e.Required)
	}
	fix := "run moat on the host, or in a container with an unmasked /proc (--security-opt systempaths=unconfined; " +
		"a pod's procMount: Unmasked) and a seccomp profile that allows sethostname (or CAP_SYS_ADMIN)"
	if e.Required == "" {
		return fmt.Sprintf("native: mode %s was asked for, and this host allows %s: %s; %s", nsexec.ModeFull, e.Mode, e.Reason, fix)
	}
	return fmt.Sprintf("native: policy %q requires mode %s, and this host allows %s (%s), which drops %s; %s, or use a policy that does not require mode %s",
		e.Policy, e.Required, e.Mode, e.Reason, strings.Join(e.Drops, "; "), fix, e.Required)
}

// modeChoice is the rung the provider's sandboxes run on, why it is not
// full, and everything full mode promises that they do not keep: the
// rung's drops, and the hostname where a filter around moat refuses it
// (nsexec.HostnameRefused), whatever the rung.
type modeChoice struct {
	mode            nsexec.Mode
	why             string
	drops           []string
	inheritHostname bool
	// provisional: no user namespace was made to choose full, and the
	// first clone the kernel refuses one lowers it (fallback.go).
	provisional bool
}

// chooseMode is the mode the provider's sandboxes run in: the host's, or
// the weaker one WithMode asks, checked against the policy's
// requires.mode ("full" also refuses a hostname that is not the
// sandbox's own). A provisional full one may still fall to no-userns
// at the first clone (startMode says when, fallback.go how).
func chooseMode(o *options, pol *policies.Policy) (modeChoice, error) {
	mode, why, provisional := startMode(o, pol)
	c, err := chooseFrom(o, pol, mode, why)
	c.provisional = provisional
	return c, err
}

// chooseFrom is chooseMode from mode, the rung the host allows, and why.
func chooseFrom(o *options, pol *policies.Policy, mode nsexec.Mode, why string) (modeChoice, error) {
	if o.mode != "" {
		if o.mode.Rank() < 0 {
			return modeChoice{}, fmt.Errorf("native: WithMode %q is not a mode; use one of %v", o.mode, nsexec.Modes)
		}
		if o.mode.Rank() < mode.Rank() {
			return modeChoice{}, &ModeError{Policy: pol.Name, Mode: mode, Reason: why}
		}
		if o.mode != mode {
			mode, why = o.mode, "chosen by the embedder (WithMode)"
		}
	}
	c := modeChoice{mode: mode, why: why, drops: mode.Drops()}
	if mode == nsexec.ModeNoUserNS {
		// No namespace at all: the walls are Landlock's and the rung's
		// filter, on a kernel that has them (nsexec.CheckNoUserNS); the
		// hostname is the host's anyway (among the drops).
		if err := checkNoUserNS(); err != nil {
			return modeChoice{}, &ModeError{Policy: pol.Name, Mode: mode, Reason: why, Err: err}
		}
		// Egress is a TCP connect to the proxy's loopback port, which
		// Landlock holds from ABI 4 (nsexec.Config.EgressTCP), to that
		// port number on any address: among the drops.
		if pol.Egress != nil {
			if abi := nsexec.LandlockABI(); abi < nsexec.NoUserNSEgressABI {
				ee := &nsexec.EgressModeError{Mode: mode, Need: nsexec.NoUserNSEgressABI, Have: abi}
				return modeChoice{}, &executor.Error{Code: executor.CodeConfig, Err: ee,
					Message: fmt.Sprintf("native: policy %q has an egress section: %v", pol.Name, ee)}
			}
			c.drops = append(c.drops, nsexec.NoUserNSEgressDrop)
		}
	} else if refused, hwhy := hostnameRefused(); refused {
		c.inheritHostname, c.drops = true, append(c.drops, nsexec.HostnameDrop)
		c.why = strings.TrimPrefix(c.why+"; "+hwhy, "; ")
	}
	if pol.Requires != nil && pol.Requires.Mode != "" {
		need := policies.ModeRank(pol.Requires.Mode)
		if mode.Rank() > need || (need == 0 && len(c.drops) > 0) {
			return modeChoice{}, &ModeError{Policy: pol.Name, Required: nsexec.Mode(pol.Requires.Mode), Mode: mode, Reason: c.why, Drops: c.drops}
		}
	}
	return c, nil
}

// lowerMode sets what the rung changes of the sandbox's config.
func lowerMode(tmpl *nsexec.Config, o *options, mode modeChoice) {
	// The second wall wherever the kernel has it (landlock_linux.go in
	// nsexec says what it grants), from ABI 2 (Linux 5.19): ABI 1
	// refuses every rename or link into another directory.
	tmpl.Landlock = !o.noLandlock && nsexec.LandlockABI() >= 2 && mode.mode != nsexec.ModeNoUserNS
	// The rung below full where the kernel refuses a procfs (mode.go).
	tmpl.NoProc = mode.mode == nsexec.ModeNoProc
	tmpl.InheritHostname = mode.inheritHostname
	// The rung with no namespace, where none can be made: Landlock is its
	// wall (nsexec's nouserns_linux.go), not a second one.
	tmpl.NoUserNS = mode.mode == nsexec.ModeNoUserNS
}

// hostMode, procMode, userNSClear, userNSRefused and hostnameRefused are
// nsexec's, variables for the tests of a host that has only a weaker
// mode, or whose refusal only the clone sees.
var (
	hostMode        = nsexec.HostMode
	procMode        = nsexec.ProcMode
	userNSClear     = nsexec.UserNSClear
	userNSRefused   = nsexec.UserNSRefused
	hostnameRefused = nsexec.HostnameRefused
	checkNoUserNS   = nsexec.CheckNoUserNS
)
