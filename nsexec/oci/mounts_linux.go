package oci

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/moat-sandbox/moat/nsexec"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// provided are the mounts an engine asks for that moat's sandbox has of its
// own (a masked procfs, a minimal /dev with a private devpts and /dev/shm,
// a /tmp tmpfs) or leaves out by its floor (no cgroupfs). A config's mount
// of that type at that place is met by moat's. /sys (sysfs) and
// /dev/mqueue (mqueue) are moat's too, where the kernel lets the sandbox
// have them (kernfs).
var provided = map[string]string{
	"/proc":          "proc",
	"/dev":           "tmpfs",
	"/dev/pts":       "devpts",
	"/dev/shm":       "",
	"/sys/fs/cgroup": "cgroup",
	"/tmp":           "tmpfs",
}

// dropped are mount options that only relabel (SELinux z and Z, moat
// applies no label); nsexec.CheckMount decides on every other one.
var dropped = map[string]bool{"z": true, "Z": true}

func (t *translator) mounts() {
	// A bind's "ro" is runc's: read-only on its top mount alone, its
	// submounts as their sources are; "rro" is every mount of its tree
	// (critest's "should support non-recursive readonly mounts").
	t.plan.Config.ReadOnlyTopOnly = true
	// Destinations of the config's own tmpfs mounts: a target below one
	// is made in that tmpfs by nsexec, not in the root.
	var tmpfs []string
	for i, m := range t.spec.Mounts {
		field := fmt.Sprintf("mounts[%d]", i)
		dst := filepath.Clean(m.Destination)
		if !filepath.IsAbs(m.Destination) {
			t.refuse(field+".destination", m.Destination, "must be an absolute path")
			continue
		}
		if len(m.UIDMappings)+len(m.GIDMappings) > 0 && m.Type != "bind" && m.Type != "" {
			t.refuse(field+".uidMappings", "", "only a bind can be id-mapped")
			continue
		}
		if dst == "/dev/shm" && (m.Type == "bind" || m.Type == "") && t.joins(specs.IPCNamespace) {
			// A pod's /dev/shm, which the CRI binds into each of its
			// containers: POSIX shared memory is files there, shared as
			// the pod's ipc namespace is. nsexec attaches it in place of
			// the sandbox's own tmpfs, in its own /dev, so the root needs
			// no target for it. A container of its own ipc namespace keeps
			// a /dev/shm of its own, as before.
			t.bind(field, m, dst, nil)
			continue
		}
		if typ, ok := provided[dst]; ok && (typ == "" || typ == m.Type || (dst == "/sys/fs/cgroup" && m.Type == "cgroup2")) {
			if dst == "/tmp" {
				t.tmpSize(field, m.Options)
			}
			continue
		}
		if t.kernfs(m, dst) {
			continue
		}
		if dst == "/" || dst == "/proc" || strings.HasPrefix(dst, "/proc/") || dst == "/dev" || strings.HasPrefix(dst, "/dev/") || dst == "/sys" || strings.HasPrefix(dst, "/sys/") {
			t.refuse(field+".destination", m.Destination, "moat builds / , /proc, /dev and /sys itself; mount elsewhere")
			continue
		}
		switch m.Type {
		case "bind", "":
			t.bind(field, m, dst, tmpfs)
		case "tmpfs":
			t.tmpfs(field, m, dst, tmpfs)
			tmpfs = append(tmpfs, dst)
		default:
			t.refuse(field+".type", m.Type, "moat mounts binds and tmpfs only (and its own proc, sysfs, mqueue, devpts)")
		}
	}
}

// kernfs takes a config's sysfs at /sys and mqueue at /dev/mqueue: moat
// mounts its own, read-only for sysfs, where the kernel lets the sandbox
// mount one, of its own network or ipc namespace; in a joined one only
// where it joins the user namespace owning it too (a pod's, which the
// runtime decides: Plan.JoinedSysfs, JoinedMqueue), and the note says
// what /sys or /dev/mqueue is otherwise.
func (t *translator) kernfs(m specs.Mount, dst string) bool {
	switch {
	case dst == "/sys" && m.Type == "sysfs":
		if t.joins(specs.NetworkNamespace) {
			t.plan.JoinedSysfs = true
			t.note("mounts /sys: no sysfs unless the container joins the user namespace that owns the joined network namespace (a pod's; the kernel gives a sysfs only to its owner); else /sys is the image's own directory")
			return true
		}
		t.plan.Config.Sysfs = true
		t.plan.Targets = append(t.plan.Targets, Target{Path: "/sys", Dir: true})
		if !slices.Contains(m.Options, "ro") {
			t.note("mounts /sys: sysfs mounted read-only (moat's floor)")
		}
		return true
	case dst == "/dev/mqueue" && m.Type == "mqueue":
		if t.joins(specs.IPCNamespace) {
			t.plan.JoinedMqueue = true
			t.note("mounts /dev/mqueue: not mounted unless the container joins the user namespace that owns the joined ipc namespace (a pod's; the kernel gives its message queues only to its owner)")
			return true
		}
		t.plan.Config.Mqueue = true
		return true
	}
	return false
}

func (t *translator) bind(field string, m specs.Mount, dst string, tmpfs []string) {
	src := m.Source
	if src == "" {
		t.refuse(field+".source", "", "a bind needs a source")
		return
	}
	if !filepath.IsAbs(src) {
		src = filepath.Join(t.bundle, src)
	}
	mount := specs.Mount{Destination: dst, Type: nsexec.MountBind, Source: filepath.Clean(src)}
	// Id-mapped when it has maps (runc's idmap): nsexec builds it.
	var opts []string
	mount.UIDMappings, mount.GIDMappings, opts = t.bindMaps(field, m, m.Options)
	if !t.options(field, &mount, opts) {
		return
	}
	t.plan.Config.Mounts = append(t.plan.Config.Mounts, mount)
	t.target(dst, isDir(src), tmpfs)
}

func (t *translator) tmpfs(field string, m specs.Mount, dst string, tmpfs []string) {
	mount := specs.Mount{Destination: dst, Type: nsexec.MountTmpfs}
	if !t.options(field, &mount, m.Options) {
		return
	}
	t.plan.Config.Mounts = append(t.plan.Config.Mounts, mount)
	t.target(dst, true, tmpfs)
}

// options sets mount's options from the config's: a tmpfs size with a
// unit suffix in bytes, SELinux relabelling dropped, a bind read-write
// unless it says ro (the OCI default; nsexec's is read-only). nsexec
// decides on every option (nsexec.CheckMount: runc's names within moat's
// floor), and what it refuses is refused here with the config's field.
func (t *translator) options(field string, mount *specs.Mount, in []string) bool {
	var out []string
	ro, rw := false, false
	for j, o := range in {
		switch {
		case dropped[o]:
			continue
		case o == "ro" || o == "rro":
			ro = true
		case o == "rw" || o == "rrw":
			rw = true
		case mount.Type == nsexec.MountTmpfs && strings.HasPrefix(o, "size="):
			n, err := parseSize(strings.TrimPrefix(o, "size="))
			if err != nil {
				t.refuse(fmt.Sprintf("%s.options[%d]", field, j), o, "%v", err)
				return false
			}
			o = "size=" + strconv.FormatInt(n, 10)
		}
		out = append(out, o)
	}
	if mount.Type == nsexec.MountBind && !ro && !rw {
		out = append(out, "rw")
	}
	mount.Options = out
	if err := nsexec.CheckMount(mount, 0); err != nil {
		var ce *nsexec.ConfigError
		if errors.As(err, &ce) {
			// Named by its index in the config, which a dropped option
			// may have moved here.
			at := field + ".options"
			if j := slices.Index(in, ce.Value); j >= 0 {
				at = fmt.Sprintf("%s[%d]", at, j)
			}
			t.refuse(at, ce.Value, "%s", ce.Reason)
		} else {
			t.refuse(field, "", "%v", err)
		}
		return false
	}
	return true
}

// tmpSize takes the size of an engine's /tmp tmpfs for moat's own /tmp.
func (t *translator) tmpSize(field string, opts []string) {
	for j, o := range opts {
		if v, ok := strings.CutPrefix(o, "size="); ok {
			n, err := parseSize(v)
			if err != nil {
				t.refuse(fmt.Sprintf("%s.options[%d]", field, j), o, "%v", err)
				return
			}
			t.plan.Config.TmpSize = n
		}
	}
}

// parseSize reads a tmpfs size: bytes, or a number with k, m or g.
func parseSize(v string) (int64, error) {
	mult := int64(1)
	switch {
	case strings.HasSuffix(v, "k"), strings.HasSuffix(v, "K"):
		mult = 1 << 10
	case strings.HasSuffix(v, "m"), strings.HasSuffix(v, "M"):
		mult = 1 << 20
	case strings.HasSuffix(v, "g"), strings.HasSuffix(v, "G"):
		mult = 1 << 30
	}
	if mult != 1 {
		v = v[:len(v)-1]
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 || n > (1<<62)/mult {
		return 0, fmt.Errorf("needs a positive size in bytes, or with k, m or g (0 or %% would mean unlimited)")
	}
	return n * mult, nil
}

// target records a mount destination the root must have, a directory or
// an empty file, unless it lies below /tmp or one of the config's tmpfs
// mounts (nsexec makes it there, in the sandbox's own memory).
func (t *translator) target(dst string, dir bool, tmpfs []string) {
	if dst == "/dev/shm" {
		return // in moat's own /dev
	}
	for _, d := range append(tmpfs, "/tmp") {
		if strings.HasPrefix(dst, d+"/") {
			return
		}
	}
	t.plan.Targets = append(t.plan.Targets, Target{Path: dst, Dir: dir})
}
