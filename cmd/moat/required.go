package main

import (
	"flag"
	"fmt"
	"io"
	"slices"

	"github.com/moat-sandbox/moat/cgroups"
	"github.com/moat-sandbox/moat/policies"
)

// limitFlags are the limit flags `moat run` and `moat dispatch` share.
type limitFlags struct {
	memory        *string
	pids          *int64
	cpus          *float64
	allowDegraded *bool
}

// addLimitFlags defines --memory, --pids, --cpus and --allow-degraded on fs.
func addLimitFlags(fs *flag.FlagSet) *limitFlags {
	return &limitFlags{
		memory:        fs.String("memory", "", "memory limit, e.g. 256M (default from the policy); swap is off"),
		pids:          fs.Int64("pids", 0, "process and thread limit (default from the policy)"),
		cpus:          fs.Float64("cpus", 0, "CPU bandwidth in CPUs, e.g. 0.5 (default from the policy)"),
		allowDegraded: fs.Bool("allow-degraded", false, "run even when a limit named by --memory, --pids, --cpus or the policy's limits.required cannot be enforced here (the sandbox then has what rlimits stand in for it, RLIMIT_DATA per process and RLIMIT_NPROC, and the wall-clock kill)"),
	}
}

// given reports whether any of the flags was set.
func (l *limitFlags) given() bool {
	return *l.memory != "" || *l.pids != 0 || *l.cpus != 0 || *l.allowDegraded
}

// apply puts the flags into the policy: the limits given override the
// policy's, and are required unless --allow-degraded.
func (l *limitFlags) apply(pol *policies.Policy) {
	if *l.memory != "" {
		pol.Limits.Memory = policies.Size(*l.memory)
	}
	if *l.pids != 0 {
		pol.Limits.Pids = *l.pids
	}
	if *l.cpus != 0 {
		pol.Limits.CPUs = *l.cpus
	}
	pol.Limits.Required = requiredLimits(pol.Limits.Required, *l.memory != "", *l.pids != 0, *l.cpus != 0, *l.allowDegraded)
}

// requiredLimits is what `moat run` must enforce or refuse to run: a limit
// typed on the command line is a requirement, not a wish, and so is what the
// policy's limits.required names. With --allow-degraded the user accepts
// running without any of them (with the rlimits that stand in for them and
// the wall-clock kill); the policy's other limits may always degrade, with a
// warning.
func requiredLimits(fromPolicy []string, memory, pids, cpus, allowDegraded bool) []string {
	if allowDegraded {
		return nil
	}
	out := append([]string(nil), fromPolicy...)
	for _, l := range []struct {
		name string
		set  bool
	}{{"memory", memory}, {"pids", pids}, {"cpus", cpus}} {
		if l.set && !slices.Contains(out, l.name) {
			out = append(out, l.name)
		}
	}
	return out
}

// refused prints one line per required limit the host cannot enforce,
// naming the limit, why and the fix, and reports whether err was that; cmd
// is the command's name ("moat run").
func refused(cmd string, err error, pol *policies.Policy, stderr io.Writer) bool {
	var reqs []*cgroups.RequiredError
	var walk func(error)
	walk = func(e error) {
		if re, ok := e.(*cgroups.RequiredError); ok {
			reqs = append(reqs, re)
			return
		}
		switch u := e.(type) {
		case interface{ Unwrap() []error }:
			for _, x := range u.Unwrap() {
				walk(x)
			}
		case interface{ Unwrap() error }:
			if x := u.Unwrap(); x != nil {
				walk(x)
			}
		}
	}
	walk(err)
	for _, re := range reqs {
		fmt.Fprintf(stderr, "%s: the %s limit (%s) cannot be enforced on this host: %s; fix: %s; or pass --allow-degraded to run without it\n",
			cmd, re.Limit, limitSetting(re.Limit, pol), re.Reason, re.Fix)
	}
	return len(reqs) > 0
}

// limitSetting names the limit as the user set it.
func limitSetting(l cgroups.Limit, pol *policies.Policy) string {
	switch l {
	case cgroups.Memory:
		return "memory " + string(pol.Limits.Memory)
	case cgroups.Pids:
		return fmt.Sprintf("pids %d", pol.Limits.Pids)
	case cgroups.CPU:
		return fmt.Sprintf("cpus %g", pol.Limits.CPUs)
	}
	return l.String()
}
