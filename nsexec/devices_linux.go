package nsexec

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// Device is a host device node given to the sandbox at Path (an OCI
// config's linux.devices entry, nsexec/oci finds its host node). A user
// namespace cannot mknod(2) one that opens (SB_I_NODEV on every
// filesystem it mounts), so, as moat's own /dev/null is, it is a bind of
// the host's node: read-only, nosuid and noexec, with the host's owner
// and mode, so a node only the host's root or a host group may open stays
// closed to the sandbox's ids, whatever mode the config asked for. The
// device cgroup's rules stay the allow-list of what may be opened at all.
type Device struct {
	// Path is where the node appears, below /dev (absolute, clean).
	Path string `json:"path"`
	// Source is the host's node, an absolute path.
	Source string `json:"source"`
	// Type is "c" (character) or "b" (block); Major and Minor its number.
	// The bound node must be of that type and number, checked on the
	// descriptor of the bind itself (a node swapped on the host in
	// between is refused, ESTALE).
	Type  string `json:"type"`
	Major uint32 `json:"major"`
	Minor uint32 `json:"minor"`
}

// reservedDev are the names of moat's own /dev (dev_linux.go), where no
// Device goes.
var reservedDev = []string{"null", "zero", "full", "random", "urandom", "tty", "fd", "stdin", "stdout", "stderr", "ptmx", "pts", "shm", "mqueue"}

// CheckDevices checks Config.Devices as Start and the child will, and
// returns nil or the *ConfigError they would ("devices[0].path").
func CheckDevices(ds []Device) error {
	seen := map[string]bool{}
	for i, d := range ds {
		at := fmt.Sprintf("devices[%d]", i)
		rel, ok := strings.CutPrefix(d.Path, "/dev/")
		switch {
		case !ok || rel == "" || filepath.Clean(d.Path) != d.Path:
			return &ConfigError{Field: at + ".path", Value: d.Path, Reason: "must be an absolute, clean path below /dev"}
		case slices.Contains(reservedDev, strings.Split(rel, "/")[0]):
			return &ConfigError{Field: at + ".path", Value: d.Path, Reason: "is part of moat's own /dev; use another name"}
		case seen[d.Path]:
			return &ConfigError{Field: at + ".path", Value: d.Path, Reason: "is given twice"}
		case !filepath.IsAbs(d.Source):
			return &ConfigError{Field: at + ".source", Value: d.Source, Reason: "must be the host node's absolute path"}
		case d.Type != "c" && d.Type != "b":
			return &ConfigError{Field: at + ".type", Value: d.Type, Reason: `must be "c" or "b"`}
		}
		seen[d.Path] = true
	}
	return nil
}

// devType is the S_IFMT of a Device's type.
func devType(t string) uint32 {
	if t == "b" {
		return unix.S_IFBLK
	}
	return unix.S_IFCHR
}

// mountDevices binds each of ds into the sandbox's /dev (dev, still
// writable), creating the parent directories it needs.
func mountDevices(dev int, ds []Device) error {
	for _, d := range ds {
		if err := mountDevice(dev, d); err != nil {
			return err
		}
	}
	return nil
}

func mountDevice(dev int, d Device) error {
	src, err := unix.Openat2(unix.AT_FDCWD, d.Source, &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: noSymlinks})
	if err != nil {
		return stepErr(StepDev, d.Path, "open the host node "+d.Source, err)
	}
	tree, err := cloneMount(src, "", attrDevNode, false)
	unix.Close(src)
	if err != nil {
		return stepErr(StepDev, d.Path, "bind the host node "+d.Source, err)
	}
	// The check is of the bind itself: what is attached is this inode.
	var st unix.Stat_t
	if err := unix.Fstat(tree, &st); err != nil {
		unix.Close(tree)
		return stepErr(StepDev, d.Path, "stat the bound node", err)
	}
	if st.Mode&unix.S_IFMT != devType(d.Type) || st.Rdev != unix.Mkdev(d.Major, d.Minor) {
		unix.Close(tree)
		return stepErr(StepDev, d.Path, fmt.Sprintf("%s is not the %s %d:%d device", d.Source, d.Type, d.Major, d.Minor), unix.ESTALE)
	}
	rel := strings.TrimPrefix(d.Path, "/dev/")
	dir, name := filepath.Split(rel)
	parent, err := unix.Dup(dev)
	if err != nil {
		unix.Close(tree)
		return stepErr(StepDev, d.Path, "", err)
	}
	for _, p := range strings.Split(strings.Trim(dir, "/"), "/") {
		if p == "" {
			continue
		}
		if err := unix.Mkdirat(parent, p, 0o755); err != nil && err != unix.EEXIST {
			unix.Close(parent)
			unix.Close(tree)
			return stepErr(StepDev, d.Path, "mkdir", err)
		}
		next, err := unix.Openat2(parent, p, &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: strictTarget})
		unix.Close(parent)
		if err != nil {
			unix.Close(tree)
			return stepErr(StepDev, d.Path, "", err)
		}
		parent = next
	}
	defer unix.Close(parent)
	if err := writeAt(parent, name, ""); err != nil {
		unix.Close(tree)
		return stepErr(StepDev, d.Path, "create", err)
	}
	return mountAt(parent, name, strictTarget, tree)
}
