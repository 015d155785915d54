package nsexec

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
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
	// prop: the propagation options in the order given, applied once
	// the mount is attached (propagation_linux.go); copyUp: a tmpfs starts
	// with a copy of what its target directory holds (tmpcopyup,
	// copyup_linux.go).
	prop   []propagation
	copyUp bool
	// plainRO: a bind's read-only was asked as "ro", not "rro" (with
	// Config.ReadOnlyTopOnly, of its top mount alone: bindAttrs).
	plainRO bool
}

// bindAttrs are the attributes of a bind's tree and those of its top
// mount alone (mount_setattr without AT_RECURSIVE): with topOnly (the
// Config's ReadOnlyTopOnly) a plain "ro" makes the top mount read-only and
// leaves the submounts as their sources are, as runc's "ro" does.
func (s *mountSpec) bindAttrs(topOnly bool) (tree, top uint64) {
	if topOnly && s.plainRO && s.recursive && s.attr&attrRdOnly != 0 {
		return s.attr &^ attrRdOnly, attrRdOnly
	}
	return s.attr, 0
}

// CheckMount checks one Config mount as Start and Prepare will, and
// returns nil or the *ConfigError they would, whose Field starts at the
// mount (".options[1]"), for a caller translating another config that
// names its own fields.
func CheckMount(m *specs.Mount, tmpSize int64) error {
	if tmpSize <= 0 {
		tmpSize = DefaultTmpSize
	}
	_, err := parseMount("", m, tmpSize)
	return err
}

// Mount options that are true of every mount a sandbox has, or that change
// nothing it relies on, accepted as said: nosuid and nodev are always set;
// a bind keeps its source's access-time behaviour, which the kernel locks
// in a user namespace (peers.md 2c.6), and for a tmpfs the atime options
// below are applied; lazytime, async, silent and loud tune only the
// superblock's writeback and logging.
var acceptedAsIs = map[string]bool{
	"nosuid": true, "nodev": true, "exec": true, "symfollow": true, "defaults": true,
	"lazytime": true, "nolazytime": true, "async": true, "silent": true, "loud": true,
}

// bindIgnored are filesystem options a bind takes and ignores, as the
// kernel does (runc passes them as the data of a MS_BIND mount(2), which
// has none): an engine gives its tmpfs defaults to every mount.
var bindIgnored = map[string]bool{"size": true, "mode": true, "nr_inodes": true, "uid": true, "gid": true}

// recursiveForms are runc's recursive option names (mount_setattr with
// AT_RECURSIVE): the same as the plain ones here, where a bind's options
// apply to every mount of its tree, but for "ro" with
// Config.ReadOnlyTopOnly (bindAttrs).
var recursiveForms = map[string]string{
	"rro": "ro", "rrw": "rw", "rnosuid": "nosuid", "rsuid": "suid", "rnodev": "nodev", "rdev": "dev",
	"rnoexec": "noexec", "rexec": "exec", "rnosymfollow": "nosymfollow", "rsymfollow": "symfollow",
	"rprivate": "private", "runbindable": "unbindable", "rshared": "shared", "rslave": "slave",
	"rrelatime": "relatime", "rnorelatime": "norelatime", "rnoatime": "noatime", "ratime": "atime",
	"rstrictatime": "strictatime", "rnostrictatime": "nostrictatime", "rnodiratime": "nodiratime", "rdiratime": "diratime",
}

// atimeAttrs are the access-time options and the attribute each sets
// (mount_setattr(2): one of relatime, noatime, strictatime, plus
// nodiratime); the negations leave the default (relatime).
var atimeAttrs = map[string]uint64{
	"relatime": unix.MOUNT_ATTR_RELATIME, "noatime": unix.MOUNT_ATTR_NOATIME, "strictatime": unix.MOUNT_ATTR_STRICTATIME,
	"nodiratime": unix.MOUNT_ATTR_NODIRATIME, "atime": 0, "norelatime": 0, "nostrictatime": 0, "diratime": 0,
}

// parseMount checks the mount of a Config at JSON path at ("mounts[2]")
// and says how to build it. tmpSize is the size cap of a tmpfs that names
// none.
//
// Accepted, and what each is built as (runc's option names; an "r" form,
// rro, rnoexec, is the same, since options apply to every mount of a bind's
// tree, but that with Config.ReadOnlyTopOnly a plain "ro" is of the top
// mount only, as runc's):
//   - type "" or "bind": an open_tree clone of Source (absolute), read-only
//     unless "rw"; "rbind" (the default) clones its submounts too, "bind"
//     only the mount at Source (the kernel refuses that, EINVAL, when it
//     would uncover what a locked submount hides).
//   - type "tmpfs": a new tmpfs (Source empty or "tmpfs"), read-write
//     unless "ro", capped at "size=BYTES" (default tmpSize), with optional
//     "nr_inodes=N", "mode=OCTAL" (its root directory), "uid=" and "gid="
//     (its root's owner, ids inside the sandbox, which must be mapped), the
//     access-time options relatime, noatime, strictatime and nodiratime,
//     and "tmpcopyup" (it starts with a copy of its target directory).
//   - a bind with uidMappings and gidMappings (both): an id-mapped mount
//     of its source (idmount_linux.go), "idmap" and "ridmap" allowed.
//   - a bind also takes and ignores size=, mode=, nr_inodes=, uid= and gid=
//     (bindIgnored).
//   - both: "noexec" adds MOUNT_ATTR_NOEXEC, "nosymfollow" (Linux 5.14)
//     MOUNT_ATTR_NOSYMFOLLOW; "shared", "slave", "private" and
//     "unbindable", and their r-forms (of the whole tree), are applied in
//     the order given once the mount is attached, within the sandbox's
//     mount namespace only (propagation_linux.go); acceptedAsIs lists the
//     rest.
//
// Anything else is a *ConfigError: another type; "suid" and "dev" (every
// mount is nosuid and nodev); "ro" with "rw"; a size of 0, which tmpfs reads as unlimited.
func parseMount(at string, m *specs.Mount, tmpSize int64) (mountSpec, error) {
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
	var ro, rro, rw, bind, rbind, atimeSet bool
	seen := map[string]bool{}
	s.attr = attrRW
	for j, o := range m.Options {
		field := fmt.Sprintf(".options[%d]", j)
		key, val, hasVal := strings.Cut(o, "=")
		if seen[key] {
			return bad(field, o, "is given twice")
		}
		seen[key] = true
		// The recursive forms (rro, rnoexec...) are the same here.
		base := o
		if b, ok := recursiveForms[o]; ok {
			base = b
		}
		switch {
		case base == "ro":
			ro, rro = true, rro || o == "rro"
		case base == "rw":
			rw = true
		case acceptedAsIs[base]:
		case base == "noexec":
			s.attr |= attrNoExec
		case base == "nosymfollow":
			s.attr |= unix.MOUNT_ATTR_NOSYMFOLLOW
		case propagationTypes[base] != 0:
			p, _ := parsePropagation(o)
			s.prop = append(s.prop, p)
		case o == "bind" && !s.tmpfs:
			bind = true
		case o == "rbind" && !s.tmpfs:
			rbind = true
		case (o == "idmap" || o == "ridmap") && idmapped:
			// runc's words for an id-mapped bind (of the mount alone, or
			// recursive): the maps make it one; bind or rbind say which.
		case hasAtime(base):
			// A bind keeps its source's (see acceptedAsIs); a tmpfs gets it.
			if attr := atimeAttrs[base]; s.tmpfs && attr != 0 {
				if attr != unix.MOUNT_ATTR_NODIRATIME {
					if atimeSet {
						return bad(field, o, "is a second access-time mode; use one of relatime, noatime, strictatime")
					}
					atimeSet = true
				}
				s.attr |= attr
			}
		case o == "tmpcopyup" && s.tmpfs:
			s.copyUp = true
		case hasVal && !s.tmpfs && bindIgnored[key]:
			// A bind has no filesystem of its own: mount(2) ignores the
			// data of MS_BIND, and so runc's binds take these as no-ops.
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
		case hasVal && s.tmpfs && (key == "uid" || key == "gid"):
			if _, err := strconv.ParseUint(val, 10, 32); err != nil {
				return bad(field, o, "needs a decimal id inside the sandbox")
			}
			s.fsopts = append(s.fsopts, o)
		case base == "suid" || base == "dev":
			return bad(field, o, "every mount of a moat sandbox is nosuid and nodev; leave it out")
		default:
			return bad(field, o, "is not supported here; a bind takes ro, rw, bind, rbind, noexec, nosymfollow, shared, slave, private, unbindable and their r-forms, nosuid, nodev, the atime options (kept as the source has them), and idmap or ridmap with uidMappings and gidMappings; a tmpfs takes those but bind, rbind and idmap, and size=, nr_inodes=, mode=, uid=, gid=, tmpcopyup")
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
	s.plainRO = ro && !rro && !s.tmpfs
	if s.tmpfs && !seen["size"] {
		s.fsopts = append(s.fsopts, "size="+strconv.FormatInt(tmpSize, 10))
	}
	return s, nil
}

func hasAtime(o string) bool { _, ok := atimeAttrs[o]; return ok }
