package oci

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"path/filepath"
	"slices"
	"strings"

	"github.com/moat-sandbox/moat/nsexec"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// Plan is a bundle translated for nsexec: the sandbox's Config (Args and
// Env travel apart, as a prepared sandbox takes them at start) and what the
// runtime does around it.
type Plan struct {
	Config nsexec.Config
	Args   []string
	Env    []string
	// Terminal: the process gets a pseudo-terminal, whose master goes to
	// the engine over --console-socket.
	Terminal    bool
	ConsoleSize *specs.Box
	// Seccomp is the config's profile, compiled as given; nil when the
	// config gives none (the runtime then applies moat's default).
	Seccomp *specs.LinuxSeccomp
	// Resources holds only what moat enforces: memory, pids, cpu.
	Resources *specs.LinuxResources
	// UIDMap and GIDMap are the config's own user namespace maps (podman
	// --userns=auto or --uidmap, a pod with hostUsers: false), checked
	// against what the caller may map; nil when the config has none (moat
	// then maps a range of its own, nsexec.WithHostRange, or the pod's
	// when the config joins another moat container's namespaces,
	// nsexec.WithSharedRange).
	UIDMap, GIDMap []nsexec.IDMap
	// IDMapMounts: moat picks the mapping (the config has no user
	// namespace maps of its own) and the caller is host root, so the
	// rootfs and binds are id-mapped with it (nsexec.WithIDMappedMounts):
	// the engine expects the container's root to own what host root
	// owns, as under runc without a user namespace.
	IDMapMounts bool
	// Targets are the mount destinations the root must have, created
	// before the start where missing (CreateTargets), whether the root is
	// read-only or not, as runc creates them.
	Targets []Target
	// Joins are the namespaces to join (linux.namespaces with a path: the
	// engine's network namespace, a pod sandbox's ipc, uts, pid, cgroup);
	// every other one is new.
	Joins []specs.LinuxNamespace
	// NetSysctl are the net.* sysctls of a joined network namespace,
	// which the sandbox cannot write itself (nsexec.WriteNetSysctls); the
	// namespaced sysctls of its own namespaces are in Config.Sysctl.
	NetSysctl map[string]string
	// OOMScoreAdj is process.oomScoreAdj, set on the sandbox's init
	// before the start (SetOOMScoreAdj); nil leaves it inherited.
	OOMScoreAdj *int
	// CgroupNS: the config asks for a cgroup namespace.
	CgroupNS bool
	// JoinedSysfs and JoinedMqueue: the config mounts a sysfs (mqueue) of
	// a network (ipc) namespace it joins, which only the user namespace
	// owning that namespace may mount: left out (a note says so) unless
	// the runtime joins that user namespace too (a pod's), when it sets
	// Config.Sysfs (Config.Mqueue) itself.
	JoinedSysfs, JoinedMqueue bool
	// Notes say what moat provides itself in place of a config entry.
	Notes []string
}

// Target is a mount destination inside the root.
type Target struct {
	Path string
	Dir  bool
}

// Translate maps spec (loaded from bundle) onto a Plan, or returns every
// refusal at once (errors.Join of *UnsupportedError). hostRoot says
// whether the caller is root of the initial user namespace (it then maps a
// host id; rootless it maps only its own).
func Translate(spec *specs.Spec, bundle string, hostRoot bool) (*Plan, error) {
	// moat mounts its own /proc, /dev and /tmp, which nsexec expects to
	// find in a root it never writes to.
	t := translator{spec: spec, bundle: bundle, hostRoot: hostRoot, plan: &Plan{
		Targets: []Target{{Path: "/proc", Dir: true}, {Path: "/dev", Dir: true}, {Path: "/tmp", Dir: true}}}}
	t.root()
	t.process()
	t.hostname()
	t.linux()
	t.mounts()
	t.hooks() // hooks_linux.go
	if len(t.errs) > 0 {
		return nil, errors.Join(t.errs...)
	}
	return t.plan, nil
}

type translator struct {
	spec     *specs.Spec
	bundle   string
	hostRoot bool
	plan     *Plan
	errs     []error
}

func (t *translator) refuse(field, value, format string, args ...any) {
	t.errs = append(t.errs, &UnsupportedError{Field: field, Value: value, Reason: fmt.Sprintf(format, args...)})
}

func (t *translator) note(format string, args ...any) {
	t.plan.Notes = append(t.plan.Notes, fmt.Sprintf(format, args...))
}

func (t *translator) root() {
	r := t.spec.Root
	if r == nil || r.Path == "" {
		t.refuse("root.path", "", "is required: moat runs a container only on its own root")
		return
	}
	p := r.Path
	if !filepath.IsAbs(p) {
		p = filepath.Join(t.bundle, p)
	}
	t.plan.Config.Rootfs = filepath.Clean(p)
	// The engine's own root (its overlay's merged directory), bound
	// read-write when the config asks, as runc leaves it; still nosuid
	// and nodev, and writable only where the sandbox's ids may write.
	t.plan.Config.RootfsWritable = !r.Readonly
}

func (t *translator) process() {
	p := t.spec.Process
	if p == nil || len(p.Args) == 0 || p.Args[0] == "" {
		t.refuse("process.args", "", "must name the program to run")
		return
	}
	t.plan.Args = p.Args
	t.plan.Env = p.Env
	if p.CommandLine != "" {
		t.refuse("process.commandLine", p.CommandLine, "is for Windows; use process.args")
	}
	cwd := p.Cwd
	if cwd == "" {
		cwd = "/"
	}
	if !filepath.IsAbs(cwd) {
		t.refuse("process.cwd", p.Cwd, "must be an absolute path")
	} else if c := filepath.Clean(cwd); c != "/" {
		t.plan.Config.Cwd = c
	}
	t.plan.Config.UID, t.plan.Config.GID, t.plan.Config.ExactIDs = p.User.UID, p.User.GID, true
	if p.User.UID == math.MaxUint32 || p.User.GID == math.MaxUint32 {
		t.refuse("process.user", fmt.Sprint(p.User.UID, ":", p.User.GID), "4294967295 is the invalid id (-1); use 0 to 4294967294")
	}
	t.groups(p.User.GID, p.User.AdditionalGids)
	if u := p.User.Umask; u != nil {
		if *u > 0o777 {
			t.refuse("process.user.umask", fmt.Sprintf("%#o", *u), "is not a mode mask; use 0 to 0777")
		}
		umask := *u
		t.plan.Config.Umask = &umask
	}
	for i, r := range p.Rlimits {
		if _, ok := nsexec.RlimitResource(r.Type); !ok {
			t.refuse(fmt.Sprintf("process.rlimits[%d].type", i), r.Type, "is not an rlimit this kernel knows")
		}
	}
	t.plan.Config.Rlimits = p.Rlimits
	t.plan.Terminal = p.Terminal
	t.plan.ConsoleSize = p.ConsoleSize
	t.capabilities(p.Capabilities)
	if !p.NoNewPrivileges {
		t.note("process.noNewPrivileges: set anyway (moat's floor)")
	}
	if p.ApparmorProfile != "" {
		t.refuse("process.apparmorProfile", p.ApparmorProfile, "moat applies no AppArmor profile; its floor is namespaces, no capabilities and seccomp (podman: --security-opt apparmor=unconfined)")
	}
	if p.SelinuxLabel != "" {
		t.refuse("process.selinuxLabel", p.SelinuxLabel, "moat applies no SELinux label (podman: --security-opt label=disable)")
	}
	if p.OOMScoreAdj != nil {
		if v := *p.OOMScoreAdj; v < -1000 || v > 1000 {
			t.refuse("process.oomScoreAdj", fmt.Sprint(v), "must be -1000 to 1000")
		} else {
			t.plan.OOMScoreAdj = &v
		}
	}
	if p.Scheduler != nil || p.IOPriority != nil || p.ExecCPUAffinity != nil {
		t.refuse("process.scheduler", "", "scheduler, ioPriority and execCPUAffinity are not supported; leave them unset")
	}
}

func (t *translator) hostname() {
	t.plan.Config.Hostname = t.spec.Hostname
	if t.spec.Hostname != "" {
		if reason := nsexec.HostnameProblem(t.spec.Hostname); reason != "" {
			t.refuse("hostname", t.spec.Hostname, "%s", reason)
		}
	}
	if t.spec.Domainname != "" {
		t.refuse("domainname", t.spec.Domainname, "is not supported; leave it unset")
	}
}

// alwaysNew are the namespaces moat creates for every sandbox, and what a
// config that shares the host's instead should say.
var alwaysNew = map[specs.LinuxNamespaceType]string{
	specs.PIDNamespace:     "podman: no --pid host",
	specs.NetworkNamespace: "podman: no --network host; ctr: no --net-host",
	specs.IPCNamespace:     "podman: no --ipc host",
	specs.UTSNamespace:     "podman: no --uts host",
	specs.MountNamespace:   "",
}

func (t *translator) linux() {
	l := t.spec.Linux
	if l == nil {
		t.refuse("linux", "", "is required")
		return
	}
	seen := map[specs.LinuxNamespaceType]bool{}
	var user *specs.LinuxNamespace
	for i, ns := range l.Namespaces {
		field := fmt.Sprintf("linux.namespaces[%d]", i)
		if seen[ns.Type] {
			t.refuse(field, string(ns.Type), "names a second %s namespace", ns.Type)
			continue
		}
		seen[ns.Type] = true
		if ns.Path != "" {
			t.join(field, ns)
			continue
		}
		switch ns.Type {
		case specs.UserNamespace:
			user = &l.Namespaces[i]
		case specs.CgroupNamespace:
			t.plan.CgroupNS = true
		case specs.TimeNamespace:
			t.refuse(field, string(ns.Type), "time namespaces are not supported")
		case specs.PIDNamespace, specs.NetworkNamespace, specs.IPCNamespace, specs.UTSNamespace, specs.MountNamespace:
		default:
			t.refuse(field, string(ns.Type), "is not a namespace type moat knows")
		}
	}
	for _, typ := range []specs.LinuxNamespaceType{specs.PIDNamespace, specs.NetworkNamespace, specs.IPCNamespace, specs.UTSNamespace, specs.MountNamespace} {
		if !seen[typ] {
			t.refuse("linux.namespaces", string(typ), "is missing: the config shares the host's, and moat always creates a new one (%s)", alwaysNew[typ])
		}
	}
	if user == nil {
		t.note("linux.namespaces: no user namespace given; moat adds one with a range of host ids of its own")
		t.plan.IDMapMounts = t.hostRoot
		if len(l.UIDMappings)+len(l.GIDMappings) > 0 {
			t.refuse("linux.uidMappings", "", "mappings without a user namespace; add {\"type\":\"user\"}")
		}
	} else {
		t.mapping(l)
	}
	t.paths(l)
	t.sysctl(l.Sysctl)
	t.resources(l.Resources)
	t.devices(l.Devices)
	// runc's eight, applied on / after the pivot; every mount is private
	// before it is cloned, so a shared root has peers in the sandbox only.
	if l.RootfsPropagation != "" {
		if slices.Contains(nsexec.RootfsPropagations, l.RootfsPropagation) {
			t.plan.Config.RootfsPropagation = l.RootfsPropagation
		} else {
			t.refuse("linux.rootfsPropagation", l.RootfsPropagation, "is not a propagation; use one of %s", strings.Join(nsexec.RootfsPropagations, ", "))
		}
	}
	if l.MountLabel != "" {
		t.refuse("linux.mountLabel", l.MountLabel, "moat applies no SELinux label (podman: --security-opt label=disable)")
	}
	if l.IntelRdt != nil || l.Personality != nil || l.MemoryPolicy != nil || len(l.NetDevices) > 0 {
		t.refuse("linux", "", "intelRdt, personality, memoryPolicy and netDevices are not supported; leave them unset")
	}
	if l.Seccomp != nil {
		t.plan.Seccomp = l.Seccomp
	}
}

// join takes a namespace to join: the engine's network (podman's bridge,
// a CRI pod's), a pod sandbox's ipc, uts, pid (shareProcessNamespace) or
// cgroup namespace, each joined before the clone with every other
// namespace new (nsexec.WithJoin, which refuses a namespace of the
// host's). The user and mount namespaces are always the sandbox's own.
func (t *translator) join(field string, ns specs.LinuxNamespace) {
	if !filepath.IsAbs(ns.Path) {
		t.refuse(field+".path", ns.Path, "must be an absolute path")
		return
	}
	switch ns.Type {
	case specs.NetworkNamespace, specs.IPCNamespace, specs.UTSNamespace, specs.PIDNamespace, specs.CgroupNamespace:
		t.plan.Joins = append(t.plan.Joins, ns)
	case specs.UserNamespace:
		t.refuse(field+".path", ns.Path, "a user namespace path is not joined from the config: moat-runtime joins a pod's container to its pod's user namespace itself, found from the other namespaces it joins (drop the path; hostUsers: false pods come with a later step)")
	case specs.MountNamespace:
		t.refuse(field+".path", ns.Path, "moat builds each sandbox's mount namespace itself and joins none")
	default:
		t.refuse(field+".path", ns.Path, "%s namespaces are not joined", ns.Type)
	}
}

// joins says whether the config joins a namespace of type typ.
func (t *translator) joins(typ specs.LinuxNamespaceType) bool {
	for _, ns := range t.plan.Joins {
		if ns.Type == typ {
			return true
		}
	}
	return false
}

func lookup(ms []specs.LinuxIDMapping, id uint32) (uint32, bool) {
	for _, m := range ms {
		if id >= m.ContainerID && uint64(id) < uint64(m.ContainerID)+uint64(m.Size) {
			// In 64 bits: a range past 2^32-1 wraps in uint32 onto a low
			// host id (4294967290+7 is uid 1); the kernel refuses such a
			// map from runc, and moat writes its own single-id map.
			h := uint64(m.HostID) + uint64(id-m.ContainerID)
			if h >= 1<<32-1 {
				return 0, false
			}
			return uint32(h), true
		}
	}
	return 0, false
}

// paths takes maskedPaths and readonlyPaths, which moat applies as runc
// does (a bind of /dev/null, an empty read-only tmpfs, a read-only bind),
// on top of its own /proc masking (nsexec.ProcMasking); a path missing in
// the sandbox is skipped.
func (t *translator) paths(l *specs.Linux) {
	for field, in := range map[string][]string{"linux.maskedPaths": l.MaskedPaths, "linux.readonlyPaths": l.ReadonlyPaths} {
		for i, p := range in {
			if !filepath.IsAbs(p) || filepath.Clean(p) != p || p == "/" {
				t.refuse(fmt.Sprintf("%s[%d]", field, i), p, "must be an absolute, clean path other than /")
			}
		}
	}
	t.plan.Config.MaskedPaths, t.plan.Config.ReadonlyPaths = l.MaskedPaths, l.ReadonlyPaths
}

// sysctl takes the namespaced sysctls (nsexec.SysctlKind): the sandbox's
// init writes those of its own ipc and network namespaces; a joined
// network namespace's are written from the runtime (NetSysctl), and a
// joined ipc namespace's are its owner's to set. Any other sysctl would
// change the host, and is refused naming it.
func (t *translator) sysctl(s map[string]string) {
	for _, k := range slices.Sorted(maps.Keys(s)) {
		v := s[k]
		field := "linux.sysctl." + k
		kind, why := nsexec.SysctlKind(k)
		switch {
		case kind == "":
			t.refuse(field, v, "%s", why)
		case strings.ContainsAny(v, "\x00\n"):
			t.refuse(field, v, "a value is one line without a NUL")
		case kind == nsexec.SysctlIPC && t.joins(specs.IPCNamespace):
			t.refuse(field, v, "belongs to the joined ipc namespace, whose owner sets it (a pod's sysctls go on its sandbox)")
		case kind == nsexec.SysctlNet && t.joins(specs.NetworkNamespace):
			if t.plan.NetSysctl == nil {
				t.plan.NetSysctl = map[string]string{}
			}
			t.plan.NetSysctl[k] = v
		default:
			if t.plan.Config.Sysctl == nil {
				t.plan.Config.Sysctl = map[string]string{}
			}
			t.plan.Config.Sysctl[k] = v
		}
	}
}

// resources keeps what moat's cgroup writes as runc's cgroupfs driver
// does: memory (limit, swap, reservation, swappiness), pids, cpu (quota,
// period, shares, cpus, mems), blockIO and hugepageLimits (the last ones
// in a group at linux.cgroupsPath only: cgroups.CreatePath). Kernel
// memory limits are taken and not written, as runc (1.1 and later) does
// with them. Device rules are met by moat's fixed /dev, which has no
// other device.
func (t *translator) resources(r *specs.LinuxResources) {
	if r == nil {
		return
	}
	var out specs.LinuxResources
	keep := false
	if r.Memory != nil {
		m := r.Memory
		var mem specs.LinuxMemory
		if m.Limit != nil && *m.Limit > 0 {
			mem.Limit = m.Limit
		}
		if m.Reservation != nil && *m.Reservation != 0 {
			mem.Reservation = m.Reservation
		}
		if m.Swappiness != nil && *m.Swappiness != ^uint64(0) {
			mem.Swappiness = m.Swappiness
		}
		if mem != (specs.LinuxMemory{}) {
			out.Memory = &mem
			keep = true
		}
		if (m.Kernel != nil && *m.Kernel != 0) || (m.KernelTCP != nil && *m.KernelTCP != 0) {
			t.note("linux.resources.memory.kernel and kernelTCP: not written, as runc does not (kernel memory limits are deprecated)")
		}
		if m.DisableOOMKiller != nil && *m.DisableOOMKiller {
			t.refuse("linux.resources.memory.disableOOMKiller", "true", "a sandbox over its memory limit is OOM-killed and reported as such")
		}
		if m.Swap != nil && *m.Swap > 0 {
			t.note("linux.resources.memory.swap: swap is off in a moat sandbox")
		}
	}
	if r.Pids != nil && r.Pids.Limit != nil && *r.Pids.Limit > 0 {
		out.Pids = &specs.LinuxPids{Limit: r.Pids.Limit}
		keep = true
	}
	if c := r.CPU; c != nil {
		if (c.Quota != nil && *c.Quota > 0) || (c.Shares != nil && *c.Shares > 0) || c.Cpus != "" || c.Mems != "" {
			out.CPU = &specs.LinuxCPU{Quota: c.Quota, Period: c.Period, Shares: c.Shares, Cpus: c.Cpus, Mems: c.Mems}
			keep = true
		}
		if c.RealtimeRuntime != nil || c.RealtimePeriod != nil || c.Idle != nil || c.Burst != nil {
			t.refuse("linux.resources.cpu", "", "only quota, period, shares, cpus and mems are supported")
		}
	}
	if r.BlockIO != nil {
		out.BlockIO = r.BlockIO
		keep = true
	}
	if len(r.HugepageLimits) > 0 {
		out.HugepageLimits = r.HugepageLimits
		keep = true
	}
	if r.Network != nil || len(r.Rdma) > 0 || len(r.Unified) > 0 {
		// net_cls and net_prio are v1 only, and rarely mounted (not here:
		// runc fails on them too where they are not).
		t.refuse("linux.resources", "", "only memory, pids, cpu, blockIO and hugepageLimits are supported (network, rdma and unified are not)")
	}
	if keep {
		t.plan.Resources = &out
	}
}
