package main

import (
	"fmt"
	"strings"

	"github.com/moat-sandbox/moat/executor"
	"github.com/moat-sandbox/moat/nsexec"
)

// modeWarning is the one line that says a sandbox runs in a degraded mode
// (DESIGN.md "Modes"): which, why, and what full mode promises that it
// does not keep; empty in full mode.
func modeWarning(cmd string, p executor.Posture) string {
	if p.Isolation == nil || p.Isolation.Native == nil {
		return ""
	}
	n := p.Isolation.Native
	if len(n.ModeDrops) == 0 {
		return ""
	}
	return fmt.Sprintf("%s: warning: mode %s, not all of full: %s; it drops %s (a policy with \"requires\": {\"mode\": \"full\"} refuses it)",
		cmd, n.Mode, n.ModeReason, strings.Join(n.ModeDrops, "; "))
}

// modeReport is the mode the host allows sandboxes, for moat doctor.
type modeReport struct {
	Mode   string   `json:"mode"`
	Reason string   `json:"reason,omitempty"`
	Drops  []string `json:"drops,omitempty"`
}

// modeNone is doctor's mode where no sandbox starts and the rung the
// probes allow does not say why.
const modeNone = "none"

// noSandboxDrop is what a host where no sandbox starts drops.
const noSandboxDrop = "namespaces: no sandbox can be made"

// diagnoseMode is the mode sandboxes run in here. started and startErr
// are doctor's real sandbox (trySandbox): the probes read a seccomp
// filter, the mountinfo and a user namespace's clone, and a host can
// refuse a sandbox for what they do not see (a setup step that fails),
// so where none started the mode says so too, rather than the rung the
// probes would allow: doctor's userns and mode lines never disagree.
func diagnoseMode(started bool, startErr string) modeReport {
	m, why := nsexec.HostMode()
	r := modeReport{Mode: string(m), Reason: why, Drops: m.Drops()}
	if m == nsexec.ModeNoUserNS {
		// No namespace to keep a hostname in; the rung runs only with
		// the Landlock it needs.
		if err := nsexec.CheckNoUserNS(); err != nil {
			r.Reason += "; " + err.Error()
			r.Drops = []string{noSandboxDrop}
		} else if !started {
			r.Reason += "; no sandbox starts here: " + startErr
			r.Drops = []string{noSandboxDrop}
		}
		return r
	}
	if !started {
		return modeReport{Mode: modeNone, Reason: "no sandbox starts here: " + startErr, Drops: []string{noSandboxDrop}}
	}
	if refused, hwhy := nsexec.HostnameRefused(); refused {
		r.Drops = append(r.Drops, nsexec.HostnameDrop)
		r.Reason = strings.TrimPrefix(r.Reason+"; "+hwhy, "; ")
	}
	return r
}

// modeFix is how to get full mode back.
const modeFix = "run moat on the host where user namespaces are allowed (not inside a moat sandbox; user.max_user_namespaces above 0, no LSM or seccomp profile that refuses them), " +
	"or in a container with an unmasked /proc (--security-opt systempaths=unconfined; " +
	"a pod's procMount: Unmasked) and a seccomp profile that allows sethostname (or CAP_SYS_ADMIN). Policies that require mode full (strict) are refused meanwhile"
