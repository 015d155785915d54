package nsexec

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// Mount types of Config.Mounts.
const (
	MountBind  = "bind"  // also the empty type
	MountTmpfs = "tmpfs" // a fresh tmpfs, size-capped
)

// mountSpec is a Config mount as it is built: every option of the Config
// mount has been accounted for, so what is built is exactly what was
// asked for (issue 13, item 3: a tmpfs that became a bind of the cwd).
type mountSpec struct {
	tmpfs     bool
	attr      uint64   // MOUNT_ATTR_* of the mount (binds: of every mount of the tree)
	recursive bool     // binds: the whole tree (rbind) or this mount only (bind)
	fsopts    []string // tmpfs: fsconfig key=value options, size= always present
}

// parseMount checks the mount at index i of a Config and says how to build
// it. tmpSize is the size cap of a tmpfs that names none.
//
// Accepted, and what each is built as:
//   - type "" or "bind": an open_tree clone of Source (absolute), read-only
//     unless "rw"; "rbind" (the default) clones its submounts too, "bind"
//     only the mount at Source (the kernel refuses that, EINVAL, when it
//     would uncover what a locked submount hides).
//   - type "tmpfs": a new tmpfs (Source empty or "tmpfs"), read-write
//     unless "ro", capped at "size=BYTES" (default tmpSize), with optional
//     "nr_inodes=N" and "mode=OCTAL" (its root directory).
//   - a bind with uidMappings and gidMappings (both): an id-mapped mount
//     of its source (idmount_linux.go), "idmap" and "ridmap" allowed.
//   - both: "nosuid" and "nodev" are always applied (saying so is allowed),
//     "noexec" adds MOUNT_ATTR_NOEXEC, "private" and "rprivate" are true of
//     every mount in the sandbox (its whole tree is made private first).
//
// Anything else (another type, "slave" propagation that is not honoured,
// "ro" with "rw", a size of 0, which tmpfs reads as unlimited) is a
// *ConfigError.
func parseMount(i int, m *specs.Mount, tmpSize int64) (mountSpec, error) {
	at := fmt.Sprintf("mounts[%d]", i)
	bad := func(field, value, format string, args ...any) (mountSpec, error) {
		return mountSpec{}, &ConfigError{Field: at + field, Value: value, Reason: fmt.Sprintf(format, args...)}
	}
	var s mountSpec
	switch m.Type {
	case "", MountBind:
		if m.Source == "" || !filepath.IsAbs(m.Source) {
			return bad(".source", m.Source, "a bind mount needs an absolute host path")
		}
		s.recursive = true
	case MountTmpfs:
		if m.Source != "" && m.Source != MountTmpfs {
			return bad(".source", m.Source, "a tmpfs has no host source; leave it empty")
		}
		s.tmpfs = true
	default:
		return bad(".type", m.Type, "is not a mount type; use %q or %q", MountBind, MountTmpfs)
	}
	if !filepath.IsAbs(m.Destination) || filepath.Clean(m.Destination) != m.Destination || m.Destination == "/" {
		return bad(".destination", m.Destination, "use an absolute, clean path other than /")
	}
	idmapped, err := checkMountMaps(at, m)
	if err != nil {
		return mountSpec{}, err
	}
	var ro, rw, bind, rbind bool
	seen := map[string]bool{}
	s.attr = attrRW
	for j, o := range m.Options {
		field := fmt.Sprintf(".options[%d]", j)
		key, val, hasVal := strings.Cut(o, "=")
		if seen[key] {
			return bad(field, o, "is given twice")
		}
		seen[key] = true
		switch {
		case o == "ro":
			ro = true
		case o == "rw":
			rw = true
		case o == "nosuid", o == "nodev", o == "private", o == "rprivate":
		case o == "noexec":
			s.attr |= attrNoExec
		case o == "bind" && !s.tmpfs:
			bind = true
		case o == "rbind" && !s.tmpfs:
			rbind = true
		case (o == "idmap" || o == "ridmap") && idmapped:
			// runc's words for an id-mapped bind (of the mount alone, or
			// recursive): the maps make it one; bind or rbind say which.
		case hasVal && s.tmpfs && (key == "size" || key == "nr_inodes"):
			n, err := strconv.ParseUint(val, 10, 63)
			if err != nil || n == 0 {
				return bad(field, o, "needs a positive decimal number (0 would mean unlimited)")
			}
			s.fsopts = append(s.fsopts, key+"="+val)
		case hasVal && s.tmpfs && key == "mode":
			if n, err := strconv.ParseUint(val, 8, 32); err != nil || n > 0o7777 || len(val) < 3 || len(val) > 4 {
				return bad(field, o, "needs an octal mode of 3 or 4 digits, like 0755")
			}
			s.fsopts = append(s.fsopts, o)
		default:
			return bad(field, o, "is not supported here; a bind takes ro, rw, bind, rbind, nosuid, nodev, noexec, private, rprivate; a tmpfs takes ro, rw, nosuid, nodev, noexec, private, rprivate, size=, nr_inodes=, mode=")
		}
	}
	switch {
	case ro && rw:
		return bad(".options", strings.Join(m.Options, ","), "has both ro and rw; use one")
	case bind && rbind:
		return bad(".options", strings.Join(m.Options, ","), "has both bind and rbind; use one")
	}
	if bind {
		s.recursive = false
	}
	// A bind is read-only unless it says rw; a tmpfs is writable unless it
	// says ro (it is the sandbox's own memory, as /tmp is).
	if ro || (!s.tmpfs && !rw) {
		s.attr |= attrRdOnly
	}
	if s.tmpfs && !seen["size"] {
		s.fsopts = append(s.fsopts, "size="+strconv.FormatInt(tmpSize, 10))
	}
	return s, nil
}
