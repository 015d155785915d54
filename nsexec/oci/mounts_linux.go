package oci

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/moat-sandbox/moat/nsexec"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// provided are the mounts an engine asks for that moat's sandbox has of its
// own (a masked procfs, a minimal /dev with a private devpts and /dev/shm,
// a /tmp tmpfs) or leaves out by its floor (no sysfs, no cgroupfs, no
// mqueue). A config's mount of that type at that place is met by moat's.
var provided = map[string]string{
	"/proc":          "proc",
	"/dev":           "tmpfs",
	"/dev/pts":       "devpts",
	"/dev/shm":       "",
	"/dev/mqueue":    "mqueue",
	"/sys":           "sysfs",
	"/sys/fs/cgroup": "cgroup",
	"/tmp":           "tmpfs",
}

// dropped are mount options that only tune access times or relabel
// (SELinux z/Z) and change nothing a sandbox relies on.
var dropped = map[string]bool{
	"relatime": true, "norelatime": true, "strictatime": true, "nostrictatime": true,
	"noatime": true, "atime": true, "nodiratime": true, "diratime": true,
	"lazytime": true, "nolazytime": true, "z": true, "Z": true,
}

func (t *translator) mounts() {
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
		if typ, ok := provided[dst]; ok && (typ == "" || typ == m.Type || (dst == "/sys/fs/cgroup" && m.Type == "cgroup2")) {
			if dst == "/tmp" {
				t.tmpSize(field, m.Options)
			}
			continue
		}
		if dst == "/" || dst == "/proc" || strings.HasPrefix(dst, "/proc/") || dst == "/dev" || strings.HasPrefix(dst, "/dev/") || dst == "/sys" || strings.HasPrefix(dst, "/sys/") {
			t.refuse(field+".destination", m.Destination, "moat builds / , /proc, /dev and /sys itself; mount elsewhere")
			continue
		}
		switch m.Type {
		case "bind", "":
			t.bind(field, m, dst)
		case "tmpfs":
			t.tmpfs(field, m, dst)
		default:
			t.refuse(field+".type", m.Type, "moat mounts binds and tmpfs only")
		}
	}
}

func (t *translator) bind(field string, m specs.Mount, dst string) {
	src := m.Source
	if src == "" {
		t.refuse(field+".source", "", "a bind needs a source")
		return
	}
	if !filepath.IsAbs(src) {
		src = filepath.Join(t.bundle, src)
	}
	opts, ok := t.options(field, m.Options, false)
	if !ok {
		return
	}
	// Id-mapped when it has maps (runc's idmap): nsexec builds it.
	uids, gids, opts := t.bindMaps(field, m, opts)
	t.plan.Config.Mounts = append(t.plan.Config.Mounts, specs.Mount{Destination: dst, Type: nsexec.MountBind, Source: filepath.Clean(src), Options: opts,
		UIDMappings: uids, GIDMappings: gids})
	t.target(dst, src)
}

func (t *translator) tmpfs(field string, m specs.Mount, dst string) {
	opts, ok := t.options(field, m.Options, true)
	if !ok {
		return
	}
	t.plan.Config.Mounts = append(t.plan.Config.Mounts, specs.Mount{Destination: dst, Type: nsexec.MountTmpfs, Options: opts})
	t.plan.Targets = append(t.plan.Targets, Target{Path: dst, Dir: true})
}

// options keeps what nsexec builds exactly (nsexec parseMount), drops what
// changes nothing, converts a tmpfs size with a unit suffix to bytes, and
// makes a bind read-write unless it says ro (the OCI default; nsexec's is
// read-only).
func (t *translator) options(field string, in []string, tmpfs bool) ([]string, bool) {
	var out []string
	ro, rw := false, false
	for j, o := range in {
		key, val, hasVal := strings.Cut(o, "=")
		switch {
		case dropped[o]:
		case o == "ro":
			ro = true
			out = append(out, o)
		case o == "rw":
			rw = true
			out = append(out, o)
		case o == "nosuid", o == "nodev", o == "noexec", o == "private", o == "rprivate":
			out = append(out, o)
		case !tmpfs && (o == "bind" || o == "rbind" || o == "idmap" || o == "ridmap"):
			out = append(out, o)
		case tmpfs && hasVal && key == "size":
			n, err := parseSize(val)
			if err != nil {
				t.refuse(fmt.Sprintf("%s.options[%d]", field, j), o, "%v", err)
				return nil, false
			}
			out = append(out, "size="+strconv.FormatInt(n, 10))
		case tmpfs && hasVal && (key == "mode" || key == "nr_inodes"):
			out = append(out, o)
		default:
			t.refuse(fmt.Sprintf("%s.options[%d]", field, j), o, "is not supported; binds take ro, rw, bind, rbind, nosuid, nodev, noexec, private, rprivate; tmpfs takes those but bind and rbind, and size=, mode=, nr_inodes=")
			return nil, false
		}
	}
	if !tmpfs && !ro && !rw {
		out = append(out, "rw")
	}
	return out, true
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

// target records a bind destination whose kind follows its source: a
// directory for a directory, else a file.
func (t *translator) target(dst, src string) {
	t.plan.Targets = append(t.plan.Targets, Target{Path: dst, Dir: isDir(src)})
}
