package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/moat-sandbox/moat/nsexec"
)

// reportWidth is the width the text report is wrapped to.
const reportWidth = 100

// printReport is the compact report: one line per layer with its verdict,
// then each problem once with its reasons and its fix. --json has every
// detail (the posture descriptor, each policy's missing limits).
func printReport(w io.Writer, r *doctorReport) {
	who := fmt.Sprintf("uid %d", r.User.UID)
	if r.User.Name != "" {
		who += " (" + r.User.Name + ")"
	}
	if r.User.SubUIDs != "" {
		who += ", subuid " + r.User.SubUIDs
	}
	where := ""
	if r.UserNS.InContainer {
		where = ", in a container"
	}
	fmt.Fprintf(w, "moat doctor: kernel %s, %s%s\n", r.Kernel, who, where)
	layer := func(name string, ok bool, verdict, detail string) {
		if !ok && verdict == "" {
			verdict = "FAILED"
		} else if ok {
			verdict = "ok"
		}
		fmt.Fprintln(w, fit(fmt.Sprintf("%-9s %-9s %s", name, verdict, detail)))
	}
	if r.UserNS.Works && r.Mode.Mode == string(nsexec.ModeNoUserNS) {
		// The sandbox started, in the rung that makes no user namespace:
		// "ok" would say namespaces work here.
		layer("userns", false, "none", "no user namespace can be made; a sandbox starts without one (mode no-userns)")
	} else {
		layer("userns", r.UserNS.Works, "", "a sandbox starts here"+ifText(!r.UserNS.Works, " (see problems)"))
	}
	switch {
	case !r.UserNS.Works:
		layer("mode", false, "", r.Mode.Mode+": no sandbox starts here (see problems)")
	case len(r.Mode.Drops) == 0:
		layer("mode", true, "", "full: every namespace, and a procfs of the sandbox's own")
	default:
		var dropped []string
		for _, d := range r.Mode.Drops {
			name, _, _ := strings.Cut(d, ":")
			dropped = append(dropped, name)
		}
		layer("mode", false, "degraded", r.Mode.Mode+": drops "+strings.Join(dropped, ", ")+" (see problems)")
	}
	lib := "libseccomp " + orNone(r.Seccomp.Library)
	if r.Seccomp.Embedded != "" {
		lib = "no libseccomp; built-in filters embedded (" + r.Seccomp.Embedded + ")"
	}
	layer("seccomp", r.Seccomp.Usable, "", fmt.Sprintf("%s; %d kernel actions", lib, len(r.Seccomp.Actions)))
	if r.Mode.Mode == string(nsexec.ModeNoUserNS) {
		// The rung's filesystem wall, not a second one.
		if r.Landlock.ABI >= nsexec.NoUserNSMinABI {
			layer("landlock", true, "", fmt.Sprintf("ABI %d: the wall of mode %s (the tool reaches the system directories, a fixed /etc list and its workdir only)", r.Landlock.ABI, nsexec.ModeNoUserNS))
		} else {
			layer("landlock", false, "refused", fmt.Sprintf("ABI %d: mode %s needs ABI %d as its wall, so no sandbox runs", r.Landlock.ABI, nsexec.ModeNoUserNS, nsexec.NoUserNSMinABI))
		}
	} else if r.Landlock.ABI >= 2 {
		layer("landlock", true, "", fmt.Sprintf("ABI %d: each sandbox's tool reaches no file outside its own root", r.Landlock.ABI))
	} else {
		layer("landlock", false, "none", fmt.Sprintf("Landlock ABI %d (2, Linux 5.19, is needed): the mount namespace is the only wall", r.Landlock.ABI))
	}
	cg := "layout " + r.Cgroups.Layout + "; memory, pids and cpu limits enforced"
	if d := degradedLimits(r.Cgroups); d != "" {
		cg = "layout " + r.Cgroups.Layout + "; not enforced by a cgroup: " + d + " (see problems)"
	}
	layer("cgroups", r.Cgroups.Fix == "", "degraded", cg)
	fmt.Fprintln(w, fit(fmt.Sprintf("%-9s %-9s %s", "", "from", r.Cgroups.Source+ifText(r.Cgroups.SourceDetail != "", ": "+r.Cgroups.SourceDetail))))
	byStatus := map[string][]string{}
	for _, p := range r.Policies {
		byStatus[p.Status] = append(byStatus[p.Status], p.Name)
	}
	var parts []string
	worst := ""
	for _, st := range []string{"full", "degraded", "refused"} {
		if names := byStatus[st]; len(names) > 0 {
			parts = append(parts, st+": "+strings.Join(names, " "))
			if st != "full" {
				worst = st
			}
		}
	}
	layer("policies", worst == "", worst, strings.Join(parts, "; "))
	eok, edetail := egressLine(r.Egress)
	layer("egress", eok, "", edetail)
	if r.Posture != nil {
		fmt.Fprintln(w, fit(fmt.Sprintf("%-9s %-9s %s", "posture", "native", r.Fingerprint)))
	}
	if len(r.Problems) == 0 {
		fmt.Fprintln(w, "no problems found")
		return
	}
	fmt.Fprintln(w, "\nproblems")
	for _, p := range r.Problems {
		wrap(w, "  - ", "    ", p.What)
		wrap(w, "    fix: ", "         ", p.Fix)
	}
}

// fit cuts a line to the report's width.
func fit(s string) string {
	if len(s) <= reportWidth {
		return s
	}
	return s[:reportWidth-3] + "..."
}

// wrap prints text wrapped at reportWidth, the first line after first and
// the others after rest.
func wrap(w io.Writer, first, rest, text string) {
	line := first
	for _, word := range strings.Fields(text) {
		if len(line)+1+len(word) > reportWidth && strings.TrimSpace(line) != strings.TrimSpace(first) {
			fmt.Fprintln(w, line)
			line = rest
		}
		if line != first && line != rest {
			line += " "
		}
		line += word
	}
	fmt.Fprintln(w, line)
}

func ifText(cond bool, s string) string {
	if cond {
		return s
	}
	return ""
}

func degradedLimits(c cgroupReport) string {
	var out []string
	for _, l := range []string{"memory", "pids", "cpu"} {
		if c.Limits[l] != "enforced" {
			out = append(out, l)
		}
	}
	return strings.Join(out, ", ")
}
