package nsexec

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// The fresh writable places of a reused sandbox's dispatch
// (reuse_init_linux.go), mounted on its own thread, in its own mount
// namespace, over those of the last one.

// freshMounts mounts this thread's fresh writable places over the old ones
// (the tool, without CAP_SYS_ADMIN, cannot unmount them).
func (c *child) freshMounts(work string) error {
	cfg := c.cfg
	root, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return stepErr(StepRootfs, "/", "reuse", err)
	}
	defer unix.Close(root)
	tmp := func(target string, scope uint64, attr int, opts ...string) error {
		fd, err := newFS("tmpfs", attr, opts...)
		if err != nil {
			return stepErr(StepTmp, target, "reuse", err)
		}
		kept, err := c.bindsUnder(target)
		if err != nil {
			unix.Close(fd)
			return err
		}
		if err := mountAt(root, target, scope, fd); err != nil {
			return err
		}
		return kept()
	}
	const plain = unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV
	if err := tmp("/tmp", strictTarget, plain, "mode=1777", "size="+strconv.FormatInt(cfg.TmpSize, 10)); err != nil {
		return err
	}
	sharedShm := false
	for i := range cfg.Mounts {
		m := &cfg.Mounts[i]
		if m.Destination == devShm {
			sharedShm = true // the policy's own /dev/shm: a fresh tmpfs below, or a pod's bind
		}
		if m.Type != MountTmpfs {
			continue
		}
		spec, err := parseMount(fmt.Sprintf("mounts[%d]", i), m, cfg.TmpSize)
		if err != nil {
			return err
		}
		fd, err := newFS("tmpfs", int(spec.attr), spec.fsopts...)
		if err != nil {
			return stepErr(StepMount, m.Destination, "reuse: create the tmpfs", err)
		}
		_ = os.MkdirAll(m.Destination, 0o755) // below a fresh /tmp
		kept, err := c.bindsUnder(m.Destination)
		if err != nil {
			unix.Close(fd)
			return err
		}
		if err := mountAt(root, m.Destination, inRootTarget, fd); err != nil {
			return err
		}
		if err := kept(); err != nil {
			return err
		}
	}
	if !sharedShm {
		if err := tmp(devShm, strictTarget, plain|unix.MOUNT_ATTR_NOEXEC, "source=shm", "mode=1777", "size="+strconv.FormatInt(cfg.TmpSize, 10)); err != nil {
			return err
		}
	}
	if cfg.Mqueue {
		fd, err := newFS("mqueue", plain|unix.MOUNT_ATTR_NOEXEC)
		if err != nil {
			return stepErr(StepDev, "/dev/mqueue", "reuse", err)
		}
		if err := mountAt(root, "/dev/mqueue", strictTarget, fd); err != nil {
			return err
		}
	}
	if cfg.Workdir == "" {
		return nil
	}
	if work == "" {
		return tmp("/work", strictTarget, plain, "mode=0755", "size="+strconv.FormatInt(cfg.TmpSize, 10))
	}
	if strings.ContainsRune(work, '/') || work == "." || work == ".." {
		return stepErr(StepBind, work, "reuse: a workdir is one name in the sandbox's workdir", unix.EINVAL)
	}
	dir, err := openTarget(root, "/work/"+work, strictTarget)
	if err != nil {
		return stepErr(StepBind, "/work/"+work, "reuse: the dispatch's workdir", err)
	}
	tree, err := unix.OpenTree(dir, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH)
	unix.Close(dir)
	if err != nil {
		return stepErr(StepBind, "/work/"+work, "reuse: open_tree", err)
	}
	return mountAt(root, "/work", strictTarget, tree)
}

// bindsUnder clones the Config binds below target, which a fresh tmpfs is
// about to cover (a bind under /tmp, the runner's directory of a test),
// and returns what attaches the clones again on the new tmpfs, where it
// makes their targets. A clone keeps its mounts' flags (read-only
// included): open_tree(2) OPEN_TREE_CLONE copies them.
func (c *child) bindsUnder(target string) (func() error, error) {
	type kept struct {
		dest string
		tree int
		dir  bool
	}
	var trees []kept
	for _, m := range c.cfg.Mounts {
		if m.Type == MountTmpfs || !strings.HasPrefix(m.Destination, target+"/") {
			continue
		}
		var st unix.Stat_t
		if err := unix.Stat(m.Destination, &st); err != nil {
			return nil, stepErr(StepBind, m.Destination, "reuse: below "+target, err)
		}
		tree, err := unix.OpenTree(unix.AT_FDCWD, m.Destination, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
		if err != nil {
			for _, k := range trees {
				unix.Close(k.tree)
			}
			return nil, stepErr(StepBind, m.Destination, "reuse: open_tree below "+target, err)
		}
		trees = append(trees, kept{m.Destination, tree, st.Mode&unix.S_IFMT == unix.S_IFDIR})
	}
	return func() error {
		var first error
		for _, k := range trees {
			err := os.MkdirAll(k.dest, 0o755)
			if !k.dir {
				if err = os.MkdirAll(filepath.Dir(k.dest), 0o755); err == nil {
					err = os.WriteFile(k.dest, nil, 0o644)
				}
			}
			if err == nil {
				err = unix.MoveMount(k.tree, "", unix.AT_FDCWD, k.dest, unix.MOVE_MOUNT_F_EMPTY_PATH)
			}
			unix.Close(k.tree)
			if err != nil && first == nil {
				first = stepErr(StepBind, k.dest, "reuse: attach again", err)
			}
		}
		return first
	}, nil
}
