package main

import (
	"fmt"
	"io"
	"slices"

	"github.com/moat-sandbox/moat/cgroups"
	"github.com/moat-sandbox/moat/policies"
)

// requiredLimits is what `moat run` must enforce or refuse to run: a limit
// typed on the command line is a requirement, not a wish, and so is what the
// policy's limits.required names. With --allow-degraded the user accepts
// running without any of them (rlimits and the wall-clock kill only); the
// policy's other limits may always degrade, with a warning.
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
// naming the limit, why and the fix, and reports whether err was that.
func refused(err error, pol *policies.Policy, stderr io.Writer) bool {
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
		fmt.Fprintf(stderr, "moat run: the %s limit (%s) cannot be enforced on this host: %s; fix: %s; or pass --allow-degraded to run without it\n",
			re.Limit, limitSetting(re.Limit, pol), re.Reason, re.Fix)
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
