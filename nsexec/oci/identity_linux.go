package oci

import (
	"errors"
	"fmt"
	"os"
	"slices"

	"github.com/moat-sandbox/moat/nsexec"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// The identity a config asks for (issue 29 item 3) and its capabilities
// (item 5): the user namespace's maps, the supplementary groups, the
// capability sets, and which binds are id-mapped.

// mapping takes the config's own user namespace maps when the caller may
// map them (nsexec.Caller.CheckIDMaps: never host root, as root none of
// moat's own ranges, in a rootless engine's namespace only the ids it
// has). Rootless otherwise moat maps the caller's own id, so the maps must
// give the process's uid and gid exactly that.
func (t *translator) mapping(l *specs.Linux) {
	u, g := t.plan.Config.UID, t.plan.Config.GID
	if len(l.UIDMappings) == 0 && len(l.GIDMappings) == 0 {
		t.note("linux.namespaces: a user namespace without mappings; moat maps a range of its own")
		t.plan.IDMapMounts = t.hostRoot
		return
	}
	hu, okU := lookup(l.UIDMappings, u)
	hg, okG := lookup(l.GIDMappings, g)
	if !okU || !okG {
		t.refuse("linux.uidMappings", fmt.Sprintf("%d:%d", u, g), "the process's uid and gid must both be mapped")
		return
	}
	caller := t.caller()
	if !caller.HostRoot && !caller.EngineNS {
		// Rootless, the one id that can be mapped is the caller's own.
		if hu != caller.UID || hg != caller.GID {
			t.refuse("linux.uidMappings", fmt.Sprintf("%d:%d", hu, hg), "rootless, moat maps the process's ids to the caller's own (%d:%d) only", caller.UID, caller.GID)
		}
		return
	}
	uids, gids := idMaps(l.UIDMappings), idMaps(l.GIDMappings)
	if err := caller.CheckIDMaps(uids, gids, u, g, nil); err != nil {
		reason := err.Error()
		var ce *nsexec.ConfigError
		if errors.As(err, &ce) {
			reason = ce.Field + " " + ce.Value + ": " + ce.Reason
		}
		if hu == 0 || hg == 0 {
			reason += " (podman: --userns=auto)"
		}
		t.refuse("linux.uidMappings", fmt.Sprintf("%d:%d", hu, hg), "%s", reason)
		return
	}
	t.plan.UIDMap, t.plan.GIDMap = uids, gids
}

// caller is what this process may map: host root when Translate was told
// so; otherwise a rootless engine's namespace root, or a plain rootless
// caller (also when the process is in fact root but Translate was told
// otherwise).
func (t *translator) caller() nsexec.Caller {
	if t.hostRoot {
		return nsexec.Caller{HostRoot: true, SetGroups: true}
	}
	c, err := nsexec.CallerIDs()
	if err != nil || c.HostRoot {
		return nsexec.Caller{UID: uint32(os.Geteuid()), GID: uint32(os.Getegid())}
	}
	return c
}

// idMaps are OCI mappings as nsexec's.
func idMaps(ls []specs.LinuxIDMapping) []nsexec.IDMap {
	out := make([]nsexec.IDMap, 0, len(ls))
	for _, l := range ls {
		out = append(out, nsexec.IDMap{Inside: l.ContainerID, Host: l.HostID, Size: l.Size})
	}
	return out
}

// groups takes process.user.additionalGids as the supplementary groups
// (containerd adds those an image's /etc/group lists for the user, and
// podman those of --group-add), where setgroups can be allowed in the
// sandbox: as root, or in a rootless engine's namespace that allows it.
// Rootless it must be denied (user_namespaces(7)), so only the primary
// gid may be named. That each is mapped is nsexec's to check.
func (t *translator) groups(gid uint32, add []uint32) {
	setgroups := t.caller().SetGroups
	seen := map[uint32]bool{}
	for i, g := range add {
		if !setgroups && g != gid {
			t.refuse(fmt.Sprintf("process.user.additionalGids[%d]", i), fmt.Sprint(g), "rootless, setgroups(2) is denied in the sandbox's user namespace (it must be, before its gid map is written), so no supplementary group can be set; drop it (podman: no --group-add)")
			continue
		}
		if !seen[g] {
			seen[g] = true
			t.plan.Config.Groups = append(t.plan.Config.Groups, g)
		}
	}
}

// capabilities takes process.capabilities as the sets the process gets
// inside its user namespace (nsexec.Capabilities says how an exec computes
// them); a name moat does not know is refused.
func (t *translator) capabilities(c *specs.LinuxCapabilities) {
	if c == nil {
		return
	}
	var caps nsexec.Capabilities
	for _, set := range []struct {
		field string
		names []string
		into  *uint64
	}{{"bounding", c.Bounding, &caps.Bounding}, {"effective", c.Effective, &caps.Effective}, {"permitted", c.Permitted, &caps.Permitted},
		{"inheritable", c.Inheritable, &caps.Inheritable}, {"ambient", c.Ambient, &caps.Ambient}} {
		for i, n := range set.names {
			b, err := nsexec.CapabilityBits([]string{n})
			if err != nil {
				t.refuse(fmt.Sprintf("process.capabilities.%s[%d]", set.field, i), n, "is not a capability moat knows (capabilities(7)); drop it")
				continue
			}
			*set.into |= b
		}
	}
	if lost := caps.Ambient &^ (caps.Permitted & caps.Inheritable); lost != 0 {
		t.note("process.capabilities.ambient: %v not raised, not in both permitted and inheritable (the kernel's rule)", nsexec.CapabilityNames(lost))
	}
	if caps != (nsexec.Capabilities{}) {
		t.plan.Config.Caps = &caps
	}
}

// bindMaps are the maps of an id-mapped bind: its own, or with runc's
// "idmap" or "ridmap" option and none of its own, the config's user
// namespace maps (runc's rule). Without either, the option is dropped:
// as root moat id-maps every bind with its own range anyway
// (IDMapMounts), rootless no bind can be id-mapped.
func (t *translator) bindMaps(field string, m specs.Mount, opts []string) (uids, gids []specs.LinuxIDMapping, out []string) {
	asked := slices.Contains(opts, "idmap") || slices.Contains(opts, "ridmap")
	if (len(m.UIDMappings) == 0) != (len(m.GIDMappings) == 0) {
		t.refuse(field+".uidMappings", "", "an id-mapped bind needs both uidMappings and gidMappings")
		return nil, nil, opts
	}
	if len(m.UIDMappings) > 0 && !t.hostRoot {
		t.refuse(field+".uidMappings", "", "rootless, a host filesystem cannot be id-mapped (mount_setattr(2) needs CAP_SYS_ADMIN over it); drop the mappings (podman: no :idmap)")
		return nil, nil, opts
	}
	if len(m.UIDMappings)+len(m.GIDMappings) > 0 || !asked {
		return m.UIDMappings, m.GIDMappings, opts
	}
	if l := t.spec.Linux; l != nil && len(l.UIDMappings) > 0 {
		return l.UIDMappings, l.GIDMappings, opts
	}
	out = slices.DeleteFunc(slices.Clone(opts), func(o string) bool { return o == "idmap" || o == "ridmap" })
	if !t.hostRoot {
		t.refuse(field+".options", "idmap", "rootless, a host filesystem cannot be id-mapped (mount_setattr(2) needs CAP_SYS_ADMIN over it); drop the option (podman: no :idmap)")
		return nil, nil, out
	}
	t.note("%s: idmap without maps: id-mapped with moat's own range, as every bind of a config without maps", field)
	return nil, nil, out
}
