package nsexec

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/moat-sandbox/moat/nsexec/internal/resolve"
	"golang.org/x/sys/unix"
)

// hostDirs are the host system directories of host mode. A directory is
// bound read-only; a symlink (merged /usr) is recreated as the same symlink.
var hostDirs = []string{"usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32"}

// hostEtc are the host /etc entries a dynamically linked tool needs: the
// loader cache, CA certificates and Debian's alternatives links. They are
// bound read-only; everything else in /etc is written by us.
var hostEtc = []string{"ld.so.cache", "ssl", "alternatives"}

// staging is where the new root is attached before pivot_root. Every bind
// source was cloned before, so covering it hides nothing we still need; the
// fixed name is only a mount point in our own mount namespace, never a path
// we create (the bwrap CVE-2019-12439 lesson).
const staging = "/tmp"

// devShm is where a Config bind replaces the sandbox's own /dev/shm tmpfs.
const devShm = "/dev/shm"

// planned is a cloned source waiting for its target.
type planned struct {
	target  string
	tree    int
	resolve uint64
	create  bool       // host mode: create the target in our tmpfs root if missing
	tmpfs   *mountSpec // a tmpfs to create in place of tree
	// prop: the propagation changes, once the tree is attached.
	prop []propagation
}

// buildRoot assembles the new root, pivots into it and makes it read-only.
func (c *child) buildRoot() error {
	cfg := c.cfg
	if cfg.NoProc {
		if err := openOuterTasks(); err != nil {
			return err
		}
	}
	// Cloneflags CLONE_NEWNS copies the host's propagation; systemd makes /
	// shared, and pivot_root(2) fails (EINVAL) when the parent of the new root
	// is shared, so everything becomes private first (Go only does this for
	// Unshareflags, syscall/exec_linux.go; peers.md 2c.5).
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return stepErr(StepPropagation, "/", "", err)
	}
	var (
		root  int
		binds []planned
		links [][2]string // name, target
		err   error
	)
	if cfg.Rootfs != "" {
		attr := uint64(attrRO)
		if cfg.RootfsWritable {
			attr = attrRW
		}
		if root, err = cloneSource(cfg.Rootfs, c.srcs.Rootfs, attr, true); err != nil {
			return stepErr(StepRootfs, cfg.Rootfs, "", err)
		}
	} else if binds, links, err = hostSources(); err != nil {
		return err
	}
	if cfg.Workdir != "" {
		tree, err := cloneSource(cfg.Workdir, c.srcs.Workdir, attrRW, true)
		if err != nil {
			return stepErr(StepBind, cfg.Workdir, "workdir", err)
		}
		binds = append(binds, planned{target: "/work", tree: tree, resolve: strictTarget, create: cfg.Rootfs == ""})
	}
	extra, err := extraSources(cfg, c.srcs.Mounts)
	if err != nil {
		return err
	}
	binds = append(binds, extra...)
	// From here on, files are created in our own tmpfs mounts, whose owner
	// must be mapped in their user namespace or creation fails (EOVERFLOW,
	// fs/namei.c may_create and fsuidgid_has_mapping), so drop to the
	// sandbox ids now.
	if err := c.switchIdentity(); err != nil {
		return err
	}
	c.mark(markSources)
	if cfg.Rootfs == "" {
		if root, err = newFS("tmpfs", unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV, "mode=0755", "size=4m", "nr_inodes=4096"); err != nil {
			return stepErr(StepRootfs, "tmpfs", "", err)
		}
	}
	defer unix.Close(root)
	if err := stage(root); err != nil {
		return err
	}
	if cfg.Rootfs == "" {
		if err := populate(root, cfg, links); err != nil {
			return err
		}
	}
	// /tmp comes before the binds, so that a bind whose target lies under
	// /tmp lands in the sandbox's tmpfs instead of being hidden by it.
	tmp, err := newFS("tmpfs", unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV, "mode=1777", "size="+strconv.FormatInt(cfg.TmpSize, 10))
	if err != nil {
		return stepErr(StepTmp, "/tmp", "", err)
	}
	if err := mountAt(root, "/tmp", strictTarget, tmp); err != nil {
		return err
	}
	// The sandbox's own tmpfs mounts, where a missing target below one is
	// made (the image cannot have it: the tmpfs hides the image's).
	own := []string{"/tmp"}
	shm := -1 // a bind at /dev/shm, attached in mountDev
	defer func() {
		if shm >= 0 {
			unix.Close(shm)
		}
	}()
	for _, b := range binds {
		if b.target == devShm && b.tmpfs == nil {
			if shm >= 0 {
				unix.Close(shm)
			}
			shm = b.tree
			continue
		}
		if b.tmpfs != nil {
			if b.tree, err = newFS("tmpfs", int(b.tmpfs.attr), b.tmpfs.fsopts...); err != nil {
				return stepErr(StepMount, b.target, "create the tmpfs", err)
			}
			if b.tmpfs.copyUp {
				if err := copyUp(root, b.target, b.resolve, b.tree); err != nil {
					unix.Close(b.tree)
					return err
				}
			}
		}
		if b.create || below(b.target, own) {
			if err := ensureTarget(root, b.target, b.tree); err != nil {
				unix.Close(b.tree)
				return err
			}
		}
		if err := attachPlanned(root, &b); err != nil {
			return err
		}
		if b.tmpfs != nil {
			own = append(own, b.target)
		}
	}
	if err := mountProc(root, c.procFD, cfg.Sysctl, cfg.NoProc); err != nil {
		return err
	}
	err = mountDev(root, cfg.TmpSize, cfg.Mqueue, shm, cfg.Devices)
	shm = -1 // attached and closed, or closed on the way
	if err != nil {
		return err
	}
	if cfg.Sysfs {
		if err := mountSysfs(root); err != nil {
			return err
		}
	}
	if err := applyMasks(root, cfg.MaskedPaths, cfg.ReadonlyPaths); err != nil {
		return err
	}
	c.mark(markMounts)
	if err := pivot(root); err != nil {
		return err
	}
	if cfg.Rootfs == "" {
		// The tmpfs root was writable while we populated it; only the root
		// mount itself turns read-only (/tmp, /work, /dev/shm stay rw).
		if err := setAttr(root, unix.MOUNT_ATTR_RDONLY, false); err != nil {
			return stepErr(StepRemountRoot, "/", "", err)
		}
	}
	if err := rootPropagation(cfg.RootfsPropagation); err != nil {
		return err
	}
	c.mark(markPivot)
	return nil
}

// attachPlanned attaches b at its target and then applies its
// propagation, on the mount as attached: the descriptor of the detached
// tree refers to it once move_mount(2) has put it in the namespace.
func attachPlanned(root int, b *planned) error {
	if len(b.prop) == 0 {
		return mountAt(root, b.target, b.resolve, b.tree)
	}
	keep, err := unix.Dup(b.tree)
	if err != nil {
		unix.Close(b.tree)
		return stepErr(StepMount, b.target, "", err)
	}
	defer unix.Close(keep)
	if err := mountAt(root, b.target, b.resolve, b.tree); err != nil {
		return err
	}
	if err := applyPropagation(keep, b.prop); err != nil {
		return stepErr(StepMount, b.target, "propagation", err)
	}
	return nil
}

// hostSources clones the host system directories and /etc entries.
func hostSources() ([]planned, [][2]string, error) {
	var binds []planned
	var links [][2]string
	add := func(name string, resolve uint64) error {
		var st unix.Stat_t
		if err := unix.Lstat("/"+name, &st); err != nil {
			return nil // absent on this host
		}
		if st.Mode&unix.S_IFMT == unix.S_IFLNK {
			target, err := readlink("/" + name)
			if err != nil {
				return stepErr(StepBind, "/"+name, "readlink", err)
			}
			links = append(links, [2]string{name, target})
			return nil
		}
		tree, err := cloneTree(unix.AT_FDCWD, "/"+name, attrRO)
		if err != nil {
			return stepErr(StepBind, "/"+name, "", err)
		}
		binds = append(binds, planned{target: "/" + name, tree: tree, resolve: strictTarget, create: true})
		return nil
	}
	for _, d := range hostDirs {
		if err := add(d, strictTarget); err != nil {
			return nil, nil, err
		}
	}
	for _, e := range append(slices.Clone(hostEtc), "localtime") {
		if err := add("etc/"+e, strictTarget); err != nil {
			return nil, nil, err
		}
	}
	return binds, links, nil
}

// extraSources clones the Config's extra binds, each only if it is the
// inode the parent opened (ids, one per mount; a tmpfs's is unused), and
// plans its tmpfs mounts (created later, once the sandbox ids own what is
// created).
func extraSources(cfg *Config, ids []fileID) ([]planned, error) {
	mounts, tmpSize, hostMode := cfg.Mounts, cfg.TmpSize, cfg.Rootfs == ""
	if len(ids) != len(mounts) {
		return nil, stepErr(StepConfig, "", "the parent sent no source inode for every mount", unix.EPROTO)
	}
	var out []planned
	for i := range mounts {
		m := &mounts[i]
		spec, err := parseMount(fmt.Sprintf("mounts[%d]", i), m, tmpSize)
		if err != nil {
			return nil, stepErr(StepConfig, m.Destination, err.Error(), unix.EINVAL)
		}
		p := planned{target: m.Destination, tree: -1, resolve: inRootTarget, create: hostMode, prop: spec.prop}
		if spec.tmpfs {
			p.tmpfs = &spec
		} else if p.tree, err = cloneBind(m.Source, &ids[i], &spec, cfg.ReadOnlyTopOnly); err != nil {
			closePlanned(out)
			return nil, stepErr(StepBind, m.Source, "", err)
		}
		out = append(out, p)
	}
	return out, nil
}

func closePlanned(ps []planned) {
	for _, p := range ps {
		if p.tree >= 0 {
			unix.Close(p.tree)
		}
	}
}

// stage attaches the new root on the staging mount point.
func stage(root int) error {
	fd, err := unix.Open(staging, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return stepErr(StepRootfs, staging, "staging mount point", err)
	}
	defer unix.Close(fd)
	if err := unix.MoveMount(root, "", fd, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH); err != nil {
		return stepErr(StepRootfs, staging, "attach the new root", err)
	}
	return nil
}

// pivot makes root the root of the mount namespace and detaches the host's.
func pivot(root int) error {
	old, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return stepErr(StepPivot, "/", "open the old root", err)
	}
	defer unix.Close(old)
	if err := unix.Fchdir(root); err != nil {
		return stepErr(StepPivot, "/", "fchdir", err)
	}
	// pivot_root(".", ".") stacks the old root on top of the new one, so no
	// put_old directory is needed in a read-only root (pivot_root(2) NOTES;
	// runc rootfs_linux.go pivotRoot). The old root is made a slave before
	// the lazy unmount so the detach cannot propagate anywhere: the old
	// root's tree alone, by its descriptor. A mount(2) on "." would be of
	// the new root, where the working directory is (the path "." does not
	// step up onto the old root stacked there), and MS_REC would undo a
	// shared mount the config asked for in the new tree.
	if err := unix.PivotRoot(".", "."); err != nil {
		return stepErr(StepPivot, "/", "pivot_root", err)
	}
	if err := unix.MountSetattr(old, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &unix.MountAttr{Propagation: unix.MS_SLAVE}); err != nil {
		return stepErr(StepPivot, "/", "make the old root a slave", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return stepErr(StepPivot, "/", "detach the old root", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return stepErr(StepPivot, "/", "chdir", err)
	}
	return nil
}

// ensureTarget creates a missing mount target (and its parents) in the
// tmpfs root of host mode: a directory for a directory tree, else a file.
func ensureTarget(root int, path string, tree int) error {
	if fd, err := openTarget(root, path, beneathTarget); err == nil {
		unix.Close(fd)
		return nil
	}
	var st unix.Stat_t
	if err := unix.Fstat(tree, &st); err != nil {
		return stepErr(StepMountTarget, path, "stat the source", err)
	}
	parts := strings.Split(strings.Trim(path, "/"), "/")
	dir, err := unix.Dup(root)
	if err != nil {
		return stepErr(StepMountTarget, path, "", err)
	}
	defer func() { unix.Close(dir) }()
	for i, p := range parts {
		last := i == len(parts)-1
		if last && st.Mode&unix.S_IFMT != unix.S_IFDIR {
			fd, err := unix.Openat(dir, p, unix.O_CREAT|unix.O_WRONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o644)
			if err != nil {
				return stepErr(StepMountTarget, path, "create", err)
			}
			unix.Close(fd)
			return nil
		}
		if err := unix.Mkdirat(dir, p, 0o755); err != nil && err != unix.EEXIST {
			return stepErr(StepMountTarget, path, "mkdir", err)
		}
		next, err := resolve.Openat2(dir, p, &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: beneathTarget})
		if err != nil {
			return stepErr(StepMountTarget, path, "", err)
		}
		unix.Close(dir)
		dir = next
	}
	return nil
}

func readlink(path string) (string, error) {
	b := make([]byte, unix.PathMax)
	n, err := unix.Readlink(path, b)
	if err != nil {
		return "", err
	}
	return string(b[:n]), nil
}

// below says whether path lies below one of dirs.
func below(path string, dirs []string) bool {
	for _, d := range dirs {
		if strings.HasPrefix(path, d+"/") {
			return true
		}
	}
	return false
}
