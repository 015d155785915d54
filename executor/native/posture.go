package native

import (
	"os"

	"github.com/moat-sandbox/moat/cgroups"
	"github.com/moat-sandbox/moat/executor"
	"github.com/moat-sandbox/moat/nsexec"
	"github.com/moat-sandbox/moat/policies"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// namespaces are created for every sandbox (the cgroup namespace too when
// the dispatch has a cgroup leaf).
var namespaces = []string{"user", "mount", "pid", "network", "ipc", "uts"}

// attest computes, once in New, what the posture descriptor reports about
// the sandbox: nothing here changes between dispatches.
func attest(l *launcher, pol *policies.Policy, hostID *nsexec.Identity, ids *executor.HostIDRange) *executor.NativeIsolation {
	n := &executor.NativeIsolation{
		Namespaces:   append([]string(nil), namespaces...),
		Cgroup:       "none",
		CgroupSource: string(cgroups.SourceNone),
		Limits:       map[string]string{"timeout": executor.LimitEnforced, "outputCap": executor.LimitEnforced},
		Rootfs:       "tmpfs+ro-binds of the host system directories",
	}
	n.Egress = attestEgress(l.egress, pol)
	n.Mode, n.ModeDrops = string(l.mode.mode), l.mode.drops
	if len(l.mode.drops) > 0 {
		n.ModeReason = l.mode.why
	}
	if l.tmpl.Landlock || l.tmpl.NoUserNS {
		n.Landlock = nsexec.LandlockABI()
	}
	if l.tmpl.NoUserNS {
		// No namespace: the host's root behind Landlock's rules, as the
		// caller's own ids (nsexec's nouserns_linux.go).
		n.Namespaces = []string{}
		n.Rootfs = "the host's, walled by Landlock (read-execute of the system directories, the workdir and TMPDIR writable)"
	}
	if l.tmpl.Rootfs != "" {
		n.Rootfs = l.tmpl.Rootfs + " (read-only)"
	}
	if len(l.tmpl.Seccomp) > 0 {
		n.Seccomp.Enabled = true
		n.Seccomp.ProfileDigest, _ = pol.SeccompDigest()
	}
	if l.cgroups != nil {
		n.Cgroup = l.cgPosture.Layout.String()
		if n.Cgroup == "unified" {
			n.Cgroup = "v2"
		}
		if !l.tmpl.NoUserNS {
			n.Namespaces = append(n.Namespaces, "cgroup")
		}
		if l.cgPosture.Source != "" {
			n.CgroupSource = string(l.cgPosture.Source)
		}
	}
	for _, s := range l.limits {
		n.Limits[s.Name] = s.State
	}
	inUID, inGID := uint32(nsexec.DefaultUID), uint32(nsexec.DefaultGID)
	if pol.Identity != nil {
		inUID, inGID = pol.Identity.UID, pol.Identity.GID
	}
	hUID, hGID, r := hostIDsOf(hostID, ids)
	n.HostIDs = r
	n.UIDMappings = []specs.LinuxIDMapping{{ContainerID: inUID, HostID: hUID, Size: 1}}
	n.GIDMappings = []specs.LinuxIDMapping{{ContainerID: inGID, HostID: hGID, Size: 1}}
	if l.tmpl.NoUserNS {
		// The tool is the caller itself, uid and gid.
		uid, gid := uint32(os.Geteuid()), uint32(os.Getegid())
		n.HostIDs = nil
		n.UIDMappings = []specs.LinuxIDMapping{{ContainerID: uid, HostID: uid, Size: 1}}
		n.GIDMappings = []specs.LinuxIDMapping{{ContainerID: gid, HostID: gid, Size: 1}}
	}
	return n
}

// hostIDsOf is the host uid and gid the provider's sandboxes run as: the
// caller's own rootless; as root, the fixed identity (WithHostIdentity), or
// the range each sandbox takes one of (WithHostIDRange), returned as r and
// its first id.
func hostIDsOf(hostID *nsexec.Identity, ids *executor.HostIDRange) (uid, gid uint32, r *executor.HostIDRange) {
	uid, gid = uint32(os.Geteuid()), uint32(os.Getegid())
	if uid != 0 {
		return uid, gid, nil
	}
	if hostID != nil {
		return hostID.UID, hostID.GID, nil
	}
	r = &executor.HostIDRange{First: nsexec.HostIDFirst, Count: nsexec.HostIDCount}
	if ids != nil {
		*r = *ids
	}
	return r.First, r.First, r
}

// Posture is the provider's regulated posture descriptor: the reference's
// fields plus the native flavour's attestation (namespaces, the seccomp
// profile digest, the cgroup layout, which limits are enforced here, the id
// mapping and the root). It does no I/O.
func (p *Provider) Posture() executor.Posture {
	return p.pipeline.Config().Posture("native", &executor.Isolation{
		Flavor:       executor.FlavorNative,
		Network:      p.network(),
		ReadOnlyRoot: true,
		CapDrop:      []string{"ALL"},
		Native:       p.nativeIsolation(),
	})
}

// network is the posture's network: "egress" when the tool reaches the
// policy's allowlist through the proxy, else the namespace's mode.
func (p *Provider) network() string {
	if p.launcher.egress != nil {
		return "egress"
	}
	return p.launcher.tmpl.Network
}
