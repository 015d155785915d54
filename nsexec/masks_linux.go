package nsexec

import (
	"fmt"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// checkPaths checks Config.MaskedPaths and ReadonlyPaths: absolute, clean
// paths other than /.
func checkPaths(c *Config) error {
	for field, paths := range map[string][]string{"maskedPaths": c.MaskedPaths, "readonlyPaths": c.ReadonlyPaths} {
		for i, p := range paths {
			if !filepath.IsAbs(p) || filepath.Clean(p) != p || p == "/" {
				return &ConfigError{Field: fmt.Sprintf("%s[%d]", field, i), Value: p, Reason: "use an absolute, clean path other than /"}
			}
		}
	}
	return nil
}

// applyMasks covers the Config's masked paths and makes its read-only paths
// read-only, once every other mount of the new root is in place, as runc
// does (libcontainer/rootfs_linux.go maskPath, readonlyPath): a masked file
// gets a bind of /dev/null, a masked directory an empty read-only tmpfs; a
// read-only path is bound read-only onto itself, its submounts included.
// Each path is resolved inside the new root, symlinks as if the root were
// / (never out of it, no /proc magic link); one that does not exist is
// skipped. What moat's /proc masking already covers is left as it is.
// Masks only ever add mounts on top: nothing hidden by another mount is
// uncovered.
func applyMasks(root int, masked, readonly []string) error {
	for _, p := range masked {
		if m, _ := ProcMasking(p); m {
			continue
		}
		fd, err := openTarget(root, p, inRootTarget)
		if err == unix.ENOENT {
			continue
		}
		if err != nil {
			return stepErr(StepMountTarget, p, "masked path", err)
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			unix.Close(fd)
			return stepErr(StepMount, p, "masked path", err)
		}
		var cover int
		if st.Mode&unix.S_IFMT == unix.S_IFDIR {
			cover, err = newFS("tmpfs", unix.MOUNT_ATTR_RDONLY|attrProc, "mode=0555", "size=4k", "nr_inodes=2")
		} else {
			cover, err = cloneTree(unix.AT_FDCWD, "/dev/null", attrDevNode)
		}
		if err == nil {
			err = attach(cover, fd)
		}
		unix.Close(fd)
		if err != nil {
			return stepErr(StepMount, p, "mask", err)
		}
	}
	for _, p := range readonly {
		if _, ro := ProcMasking(p); ro {
			continue
		}
		fd, err := openTarget(root, p, inRootTarget)
		if err == unix.ENOENT {
			continue
		}
		if err != nil {
			return stepErr(StepMountTarget, p, "read-only path", err)
		}
		tree, err := cloneTree(fd, "", attrRO)
		if err == nil {
			err = attach(tree, fd)
		}
		unix.Close(fd)
		if err != nil {
			return stepErr(StepMount, p, "make read-only", err)
		}
	}
	return nil
}
