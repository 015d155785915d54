package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/user"
	"strings"
	"time"

	"github.com/moat-sandbox/moat/cgroups"
	"github.com/moat-sandbox/moat/executor"
	"github.com/moat-sandbox/moat/executor/native"
	"github.com/moat-sandbox/moat/nsexec"
	"github.com/moat-sandbox/moat/policies"
	"github.com/moat-sandbox/moat/seccomp"
	"golang.org/x/sys/unix"
)

// doctorReport is what `moat doctor` found: facts about the host, and what each
// built-in policy gets here.
type doctorReport struct {
	Kernel   string         `json:"kernel"`
	User     identity       `json:"user"`
	UserNS   userNSReport   `json:"userNamespaces"`
	Mode     modeReport     `json:"mode"`
	Seccomp  seccompReport  `json:"seccomp"`
	Landlock landlockReport `json:"landlock"`
	Cgroups  cgroupReport   `json:"cgroups"`
	Policies []policyReport `json:"policies"`
	Egress   egressReport   `json:"egress"`
	// Posture is the native provider's regulated posture for the default
	// policy, and Fingerprint its hash (it moves when a setting loosens).
	Posture     *executor.Posture `json:"posture,omitempty"`
	Fingerprint string            `json:"fingerprint,omitempty"`
	Problems    []problem         `json:"problems"`
}

type identity struct {
	UID     int    `json:"uid"`
	Name    string `json:"name,omitempty"`
	Root    bool   `json:"root"`
	SubUIDs string `json:"subuid,omitempty"` // "start:count" from /etc/subuid, if any
}

type userNSReport struct {
	MaxUserNamespaces     string `json:"maxUserNamespaces,omitempty"`
	UnprivilegedClone     string `json:"unprivilegedUsernsClone,omitempty"`
	AppArmorRestrictUserN string `json:"apparmorRestrictUnprivilegedUserns,omitempty"`
	InContainer           bool   `json:"inContainer"`
	// Works is the result of starting a real sandbox (/bin/true).
	Works bool   `json:"works"`
	Error string `json:"error,omitempty"`
}

// landlockReport is the second wall: the kernel's Landlock ABI (0 for
// none), which the native provider puts every sandbox's tool behind.
type landlockReport struct {
	ABI int `json:"abi"`
}

type seccompReport struct {
	Library string `json:"library,omitempty"`
	// Embedded is the libseccomp that compiled the built-in policies'
	// programs a build without cgo carries (Library is then empty): such a
	// build runs them, and refuses a custom profile.
	Embedded string   `json:"embedded,omitempty"`
	Actions  []string `json:"actions,omitempty"`
	Usable   bool     `json:"usable"`
}

type cgroupReport struct {
	Layout  string            `json:"layout"`
	Parents []string          `json:"parents,omitempty"`
	Limits  map[string]string `json:"limits"` // limit -> "enforced" or the reason it is not
	Fix     string            `json:"fix,omitempty"`
	// Source says which path gave the cgroup (systemd-scope, delegated,
	// cgroup-parent, root, none) and SourceDetail which one, or why none.
	Source       string `json:"source"`
	SourceDetail string `json:"sourceDetail,omitempty"`
}

type policyReport struct {
	Name    string   `json:"name"`
	Status  string   `json:"status"` // full, degraded, refused
	Missing []string `json:"missing,omitempty"`
	// Limits says how each memory, pids and cpu limit holds here: by the
	// cgroup, by an rlimit standing in for it, or not at all.
	Limits []native.LimitState `json:"limits,omitempty"`
}

type problem struct {
	What string `json:"what"`
	Fix  string `json:"fix"`
}

// doctorCmd reports what this host allows and what moat enforces here.
func doctorCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("moat doctor", flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print the doctorReport as JSON")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: moat doctor [--json]\n\nReports what this host allows (user namespaces, seccomp, cgroups) and, for each\nbuilt-in policy, whether it runs fully, degraded or not at all, with the fix for\neach problem. Exit status 0 when the default policy runs fully, 1 otherwise.")
		fs.PrintDefaults()
	}
	if status, done := parseFlags(fs, args); done {
		return status
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return exitUsage
	}
	r := diagnose()
	if *asJSON {
		b, _ := json.MarshalIndent(r, "", "  ")
		fmt.Fprintln(stdout, string(b))
	} else {
		printReport(stdout, r)
	}
	for _, p := range r.Policies {
		if p.Name == "default" && p.Status == "full" {
			return exitOK
		}
	}
	return exitFailure
}

// cgroupProblem starts the problem of a host whose cgroups miss limits.
const cgroupProblem = "cgroup limits are degraded on this host"

func diagnose() *doctorReport {
	r := &doctorReport{}
	var uts unix.Utsname
	if unix.Uname(&uts) == nil {
		r.Kernel = unix.ByteSliceToString(uts.Release[:])
	}
	r.User = identity{UID: os.Geteuid(), Root: os.Geteuid() == 0}
	if u, err := user.LookupId(fmt.Sprint(os.Geteuid())); err == nil {
		r.User.Name = u.Username
		r.User.SubUIDs = subIDs("/etc/subuid", u.Username)
	}
	r.UserNS = userNSReport{
		MaxUserNamespaces:     sysctl("user/max_user_namespaces"),
		UnprivilegedClone:     sysctl("kernel/unprivileged_userns_clone"),
		AppArmorRestrictUserN: sysctl("kernel/apparmor_restrict_unprivileged_userns"),
		InContainer:           inContainer(),
	}
	if a := sysctl("kernel/seccomp/actions_avail"); a != "" {
		r.Seccomp.Actions = strings.Fields(a)
	}
	r.Seccomp = diagnoseSeccomp(r)
	r.Landlock = landlockReport{ABI: nsexec.LandlockABI()}
	if !r.Seccomp.Usable {
		r.Problems = append(r.Problems, problem{"seccomp filters cannot be compiled or loaded (library " + orNone(r.Seccomp.Library) + ", kernel actions " + orNone(strings.Join(r.Seccomp.Actions, " ")) + ")",
			"use a moat built with cgo and libseccomp (the release build is static) on a kernel with CONFIG_SECCOMP_FILTER"})
	}
	r.Cgroups = cgroupsReport()
	if r.Cgroups.Fix != "" {
		r.Problems = append(r.Problems, problem{cgroupProblem + " (" + degradedLimits(r.Cgroups) + "): " + r.Cgroups.SourceDetail, r.Cgroups.Fix})
	}
	r.UserNS.Works, r.UserNS.Error = trySandbox()
	r.Mode = diagnoseMode(r.UserNS.Works, r.UserNS.Error)
	if !r.UserNS.Works {
		// One problem: the mode's reason is the sandbox's error.
		r.Problems = append(r.Problems, problem{"a sandbox cannot be started: " + r.UserNS.Error, userNSFix(r)})
	} else if len(r.Mode.Drops) > 0 {
		r.Problems = append(r.Problems, problem{"sandboxes run in mode " + r.Mode.Mode + ": " + r.Mode.Reason + "; it drops " + strings.Join(r.Mode.Drops, "; "), modeFix})
	}
	for _, name := range policies.Builtins() {
		r.Policies = append(r.Policies, judgePolicy(name, r))
	}
	standInNote(r)
	egressCheck(r)
	return r
}

// trySandbox starts a real sandbox running /bin/true under the default
// policy without cgroups: the only sure test that namespaces work here.
func trySandbox() (bool, string) {
	pol, err := policies.Builtin("default")
	if err != nil {
		return false, err.Error()
	}
	p, err := native.New(append(sandboxOptions(), native.WithPolicy(pol), native.WithoutCgroups(), native.WithTimeout(10*time.Second))...)
	if err != nil {
		return false, err.Error()
	}
	defer p.Close()
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		return false, err.Error()
	}
	defer null.Close()
	st, err := p.Run(context.Background(), &native.Command{Args: []string{"/bin/true"}, Env: []string{"PATH=" + defaultPath}, Stdin: null, Stdout: null, Stderr: null})
	if err != nil {
		var e *executor.Error
		if errors.As(err, &e) && e.Err != nil {
			return false, e.Err.Error()
		}
		return false, err.Error()
	}
	if st.Code != 0 {
		return false, fmt.Sprintf("/bin/true exited %d in the sandbox", st.Code)
	}
	return true, ""
}

func cgroupsReport() cgroupReport {
	c := cgroupReport{Limits: map[string]string{}}
	// What the native provider itself will use: it may pick another parent
	// than the cgroups default (the v2 root as root, see native).
	// The provider only reports its cgroups here; it never runs a tool.
	pv, err := native.New(native.WithPolicy(&policies.Policy{Unfiltered: true}), native.WithSystemdBus(userBus()))
	if err != nil {
		c.Layout = "unknown"
		for _, l := range []string{"memory", "pids", "cpu"} {
			c.Limits[l] = err.Error()
		}
		c.Fix = "check that a cgroup file system is mounted at /sys/fs/cgroup"
		c.Source, c.SourceDetail = string(cgroups.SourceNone), err.Error()
		return c
	}
	defer pv.Close()
	p := pv.Cgroups()
	c.Layout, c.Parents, c.Fix = p.Layout.String(), p.Parents, p.Fix
	c.Source, c.SourceDetail = string(p.Source), p.SourceDetail
	for _, l := range []cgroups.Limit{cgroups.Memory, cgroups.Pids, cgroups.CPU} {
		lp := p.Of(l)
		if lp.Enforced {
			c.Limits[l.String()] = "enforced"
		} else {
			c.Limits[l.String()] = lp.Reason
		}
	}
	if !p.Degraded() {
		c.Fix = ""
	}
	return c
}

// judgePolicy says whether a built-in policy runs fully, degraded (limits
// not enforced, seccomp missing) or not at all here.
// diagnoseSeccomp fills in what this build compiles or carries, and
// whether filters can run here at all (the kernel's actions, in r).
func diagnoseSeccomp(r *doctorReport) seccompReport {
	s := r.Seccomp
	s.Library = seccomp.LibraryVersion()
	if s.Library == "" {
		s.Embedded = seccomp.PrecompiledLibrary()
	}
	s.Usable = (s.Library != "" || s.Embedded != "") && len(s.Actions) > 0
	return s
}

func judgePolicy(name string, r *doctorReport) policyReport {
	pr := policyReport{Name: name, Status: "full"}
	pol, err := policies.Builtin(name)
	if err != nil {
		return policyReport{Name: name, Status: "refused", Missing: []string{err.Error()}}
	}
	if !r.UserNS.Works {
		return policyReport{Name: name, Status: "refused", Missing: []string{"namespaces: " + r.UserNS.Error}}
	}
	if pol.Seccomp != nil && !r.Seccomp.Usable {
		return policyReport{Name: name, Status: "refused", Missing: []string{"seccomp"}}
	}
	// The mode the probes decided (diagnoseMode), not a provisional full
	// one that only a clone would lower (native's fallback.go).
	m, _ := nsexec.HostMode()
	p, err := native.New(native.WithPolicy(pol), native.WithSystemdBus(userBus()), native.WithMode(m))
	if err != nil {
		return policyReport{Name: name, Status: "refused", Missing: []string{err.Error()}}
	}
	defer p.Close()
	if name == "default" {
		posture := p.Posture()
		r.Posture, r.Fingerprint = &posture, executor.Fingerprint(posture)
	}
	if n := p.Posture().Isolation.Native; n != nil && len(n.ModeDrops) > 0 {
		pr.Status = "degraded"
		pr.Missing = append(pr.Missing, "mode "+n.Mode+": "+strings.Join(n.ModeDrops, "; "))
	}
	pr.Limits = p.Limits()
	for _, l := range pr.Limits {
		if l.State != executor.LimitEnforced {
			pr.Status = "degraded"
			pr.Missing = append(pr.Missing, l.String()+": "+l.Reason)
		}
	}
	return pr
}

// standInNote adds to the cgroup problem what holds the default policy's
// limits instead, exactly: an rlimit per process or for the sandbox, or
// nothing.
func standInNote(r *doctorReport) {
	var held []string
	for _, p := range r.Policies {
		if p.Name != "default" {
			continue
		}
		for _, l := range p.Limits {
			if l.State != executor.LimitEnforced {
				held = append(held, l.Detail())
			}
		}
	}
	for i := range r.Problems {
		if len(held) > 0 && strings.HasPrefix(r.Problems[i].What, cgroupProblem) {
			r.Problems[i].What += ". Meanwhile the default policy runs with " + strings.Join(held, ", ")
		}
	}
}

func userNSFix(r *doctorReport) string {
	switch {
	case r.UserNS.AppArmorRestrictUserN == "1":
		return "Ubuntu's AppArmor restricts unprivileged user namespaces: install an AppArmor profile for the moat binary with the `userns,` permission (see README), or set kernel.apparmor_restrict_unprivileged_userns=0"
	case r.UserNS.MaxUserNamespaces == "0":
		return "user namespaces are disabled: sysctl -w user.max_user_namespaces=15000"
	case r.UserNS.UnprivilegedClone == "0":
		return "unprivileged user namespaces are disabled: sysctl -w kernel.unprivileged_userns_clone=1"
	case r.UserNS.InContainer:
		return "moat is inside a container whose seccomp profile or masked /proc forbids nested sandboxes: run the container with --security-opt seccomp=unconfined and an unmasked /proc (--security-opt systempaths=unconfined), or run moat on the host"
	}
	return "see the error: it names the setup step that failed"
}

func sysctl(name string) string {
	b, err := os.ReadFile("/proc/sys/" + name)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// inContainer reports the usual marks of running inside a container.
func inContainer() bool {
	for _, p := range []string{"/.dockerenv", "/run/.containerenv"} {
		if _, err := os.Stat(p); err == nil {
			return true
		}
	}
	b, _ := os.ReadFile("/proc/1/environ")
	return strings.Contains(string(b), "container=")
}

// subIDs returns "start:count" of the first /etc/subuid entry for name.
func subIDs(path, name string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Split(line, ":")
		if len(f) == 3 && f[0] == name {
			return f[1] + ":" + f[2]
		}
	}
	return ""
}

func orNone(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
