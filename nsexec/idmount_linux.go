package nsexec

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"slices"
	"strconv"
	"syscall"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// Id-mapped mounts (mount_setattr(2) MOUNT_ATTR_IDMAP, Linux 5.12). A
// sandbox's ids are host ids of its own (a range, WithHostRange), so the
// files of a host directory owned by host root, or by host uid 1000, are
// nobody's inside: container root cannot write a root-owned 0755 volume,
// and an image's service user finds its own files owned by someone else.
// An id-mapped mount of such a source shows its files owned through a
// user namespace's map: with the sandbox's own (0 inside is host R), a
// file the host's uid 0 owns shows as owned by host R, which is the
// sandbox's root, and what the sandbox's root writes there lands owned by
// host uid 0 (Documentation/filesystems/idmappings.rst). Nothing outside
// the mount changes, and the sandbox's user namespace still maps no host
// root: host root's files become the sandbox's only where the engine put
// them in its reach, as they are a runc container's.
//
// The mount is made on the host side: mount_setattr with MOUNT_ATTR_IDMAP
// needs CAP_SYS_ADMIN in the user namespace that owns the source's
// superblock (fs/namespace.c can_idmap_mount), the initial one for a host
// filesystem, so only root can, and the sandbox child never could. And
// its flags must be locked: a sandbox granted CAP_SYS_ADMIN (Config.Caps)
// could otherwise clear its nodev or read-only flag (mount_setattr or
// MS_REMOUNT|MS_BIND), and through an id-mapped mount, where a device node
// host root owns is container root's, open the host's disks. The kernel
// locks a mount's flags when it copies the mount into a mount namespace of
// a less privileged user namespace (fs/namespace.c clone_mnt,
// CL_UNPRIVILEGED: MNT_LOCK_READONLY, MNT_LOCK_NODEV, MNT_LOCK_NOSUID), and
// a clone of a locked mount stays locked. So the parent
//
//  1. clones each source (open_tree(2) OPEN_TREE_CLONE of the inode it
//     opened by the hostpath rule, a detached copy) and sets
//     MOUNT_ATTR_IDMAP, nosuid, nodev and, where every use is read-only,
//     rdonly on the copy, with a user namespace that has the map: a
//     process of its own, stopped by PTRACE_TRACEME at its execve before
//     any of its code runs (runc makes its mapping namespaces the same
//     way), whose /proc/PID/ns/user is kept and which is then killed;
//  2. on the thread that spawns the sandbox (own), unshares its mount
//     namespace, makes it private (so nothing propagates to the host's)
//     and attaches each copy over its source there;
//  3. spawns the sandbox from that thread: the child's mount namespace is
//     a copy of that one, with every flag locked, and the child clones the
//     source path as it always does, the id-mapped mount on top of it;
//  4. returns the thread to the host's mount namespace (setns), so the
//     private copy of the host's mount table is freed at once instead of
//     pinning every host mount for the sandbox's life.
// TestIDMappedVolume and TestIDMappedFlagsLocked try both sides.
//
// The same locking serves a sandbox granted CAP_SYS_ADMIN without
// id-mapped mounts: the read-only, nosuid and nodev flags the child sets
// on its own copies are its user namespace's to clear, so as root the
// parent prepares every bind and the rootfs the same way, without the
// id map (lockAll). Rootless the parent cannot (it has no mount namespace
// of its own to attach in), and a tool granted CAP_SYS_ADMIN could make a
// read-only bind writable again, as the caller's own id.

// idTree is one detached, id-mapped copy of a source, to be attached over
// its path.
type idTree struct {
	fd   int
	path string
	id   fileID
}

// idMounts are one sandbox's id-mapped copies.
type idMounts struct {
	trees []idTree
}

// close closes what was not attached.
func (im *idMounts) close() {
	if im == nil {
		return
	}
	for _, t := range im.trees {
		if t.fd >= 0 {
			unix.Close(t.fd)
		}
	}
	im.trees = nil
}

// idUse is what the sandbox's mounts ask of one source.
type idUse struct {
	path       string
	id         fileID
	uids, gids []IDMap // nil: locked only, not id-mapped
	readOnly   bool    // every use is read-only
	topOnly    bool    // every use's read-only is of its top mount alone (Config.ReadOnlyTopOnly)
	recursive  bool    // a use takes the submounts too
	explicit   bool    // a mount asked for it (an error if it cannot be had)
	owned      bool    // owner-mapped (ownermap_linux.go): owner must still own it
	owner      owner
	what       string
}

// mountMaps are the maps of an explicit id-mapped bind, or nil.
func mountMaps(m *specs.Mount) (uids, gids []IDMap) {
	conv := func(ls []specs.LinuxIDMapping) []IDMap {
		var out []IDMap
		for _, l := range ls {
			out = append(out, IDMap{Inside: l.ContainerID, Host: l.HostID, Size: l.Size})
		}
		return out
	}
	return conv(m.UIDMappings), conv(m.GIDMappings)
}

// prepareIDMounts makes the id-mapped copies c needs: of every bind whose
// Config mount has maps, and with WithIDMappedMounts of the rootfs and
// every bind, with the sandbox's own maps, and with WithOwnerMappedBinds
// of the read-only binds ownerMaps picks, mapping their owner alone. It
// returns nil when there are none. Rootless an explicit one is refused (a
// host filesystem cannot be id-mapped but by root); WithIDMappedMounts
// and WithOwnerMappedBinds do nothing.
func prepareIDMounts(c *Config, paths *hostPaths, m *mapping, o *options) (*idMounts, error) {
	ids := &paths.ids
	var uses []*idUse
	use := func(u idUse) error {
		for _, p := range uses {
			if p.id != u.id {
				continue
			}
			if !slices.Equal(p.uids, u.uids) || !slices.Equal(p.gids, u.gids) {
				return &ConfigError{Field: u.what, Value: u.path, Reason: "id-maps a source that " + p.what + " id-maps with other maps; one source has one id-mapped mount"}
			}
			p.readOnly = p.readOnly && u.readOnly
			p.topOnly = p.topOnly && u.topOnly
			p.recursive = p.recursive || u.recursive
			p.explicit = p.explicit || u.explicit
			return nil
		}
		uses = append(uses, &u)
		return nil
	}
	auto := o.idmapAll && m.root
	ownerMap := o.ownerMap && m.root && !auto
	writable := map[fileID]bool{} // sources some bind writes: never owner-mapped
	lockAll := m.root && c.Caps != nil && c.Caps.all()&(1<<unix.CAP_SYS_ADMIN) != 0
	if (auto || lockAll) && c.Rootfs != "" && ids.Rootfs != nil {
		u := idUse{path: c.Rootfs, id: *ids.Rootfs, readOnly: !c.RootfsWritable, recursive: true, what: "rootfs"}
		if auto {
			u.uids, u.gids = m.uids, m.gids
		}
		if err := use(u); err != nil {
			return nil, err
		}
	}
	parsed := make([]mountSpec, len(c.Mounts))
	for i := range c.Mounts {
		mt := &c.Mounts[i]
		if mt.Type == MountTmpfs {
			continue
		}
		spec, err := parseMount(fmt.Sprintf("mounts[%d]", i), mt, c.TmpSize)
		if err != nil {
			return nil, err
		}
		parsed[i] = spec
		if spec.attr&unix.MOUNT_ATTR_RDONLY == 0 {
			writable[ids.Mounts[i]] = true
		}
	}
	for i := range c.Mounts {
		mt := &c.Mounts[i]
		if mt.Type == MountTmpfs {
			continue
		}
		spec := parsed[i]
		_, top := spec.bindAttrs(c.ReadOnlyTopOnly)
		u := idUse{path: mt.Source, id: ids.Mounts[i], readOnly: spec.attr&unix.MOUNT_ATTR_RDONLY != 0,
			topOnly: top != 0, recursive: spec.recursive, what: fmt.Sprintf("mounts[%d]", i)}
		if u.uids, u.gids = mountMaps(mt); u.uids != nil {
			if !m.root {
				return nil, &ConfigError{Field: u.what + ".uidMappings", Value: mt.Source,
					Reason: "rootless, a host filesystem cannot be id-mapped (mount_setattr(2) needs CAP_SYS_ADMIN over its superblock); drop the mappings"}
			}
			u.explicit = true
		} else if auto {
			u.uids, u.gids = m.uids, m.gids
		} else if uids, gids := ownerMaps(paths.owners[i], m.id); ownerMap && u.readOnly && !writable[u.id] && uids != nil {
			u.uids, u.gids, u.explicit, u.owned, u.owner = uids, gids, true, true, paths.owners[i]
		} else if !lockAll {
			continue
		}
		if err := use(u); err != nil {
			return nil, err
		}
	}
	if len(uses) == 0 {
		return nil, nil
	}
	im := &idMounts{}
	userns := map[string]int{}
	defer func() {
		for _, fd := range userns {
			unix.Close(fd)
		}
	}()
	for _, u := range uses {
		key := fmt.Sprint(u.uids, u.gids)
		ns, ok := userns[key]
		if !ok && u.uids == nil {
			ns = -1 // locked only
		} else if !ok {
			var err error
			if ns, err = mappingNamespace(u.uids, u.gids); err != nil {
				im.close()
				return nil, &SetupError{Step: StepBind, Path: u.path, Errno: errnoOf(err), Detail: "id-mapped mount: a user namespace with its maps: " + err.Error()}
			}
			userns[key] = ns
		}
		fd, err := idMapped(u, ns)
		if err != nil && !u.explicit {
			// Not for this filesystem: the bind stays plain, as without
			// WithIDMappedMounts (locked still, if it must be). An
			// overlayfs root, an engine's usual, is one: overlayfs can
			// take id-mapped layers but cannot be id-mapped itself, so
			// that is expected and only logged at debug level.
			level := slog.LevelWarn
			if u.what == "rootfs" {
				level = slog.LevelDebug
			}
			o.logger.Log(context.Background(), level, "a source stays a plain bind: its filesystem cannot be id-mapped here, so files of host ids outside the sandbox's range show as nobody's",
				slog.String("mount", u.what), slog.String("source", u.path), slog.String("err", err.Error()))
			if !lockAll {
				continue
			}
			if fd, err = idMapped(u, -1); err != nil {
				im.close()
				return nil, &SetupError{Step: StepBind, Path: u.path, Errno: errnoOf(err), Detail: u.what + ": lock its flags"}
			}
		}
		if err != nil && u.owned {
			im.close()
			return nil, ownerMapError(u, err)
		}
		if err != nil {
			im.close()
			return nil, &SetupError{Step: StepBind, Path: u.path, Errno: errnoOf(err), Detail: u.what + ": id-mapped mount",
				Hint: "id-mapped mounts need Linux 5.12 and a filesystem that supports them (ext4, xfs, btrfs, tmpfs since 6.3, overlayfs since 5.19; not NFS, nor a filesystem mounted in another user namespace); drop the mount's uidMappings and gidMappings"}
		}
		im.trees = append(im.trees, idTree{fd: fd, path: u.path, id: u.id})
	}
	if len(im.trees) == 0 {
		return nil, nil
	}
	return im, nil
}

// idMapped returns a detached copy of u's source, id-mapped through the
// user namespace at ns (none if ns is -1), nosuid and nodev, and
// read-only if every use is.
// The source is reopened by its resolved path with no symlink followed
// and must be the inode the parent opened.
func idMapped(u *idUse, ns int) (int, error) {
	src, err := unix.Openat2(unix.AT_FDCWD, u.path, &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: noSymlinks})
	if err != nil {
		return -1, err
	}
	defer unix.Close(src)
	var st unix.Stat_t
	if err := unix.Fstat(src, &st); err != nil {
		return -1, err
	}
	if idOf(&st) != u.id || u.owned && st.Uid != u.owner.uid {
		return -1, unix.ESTALE
	}
	flags := uint(unix.OPEN_TREE_CLONE | unix.OPEN_TREE_CLOEXEC | unix.AT_EMPTY_PATH)
	setFlags := uint(unix.AT_EMPTY_PATH)
	if u.recursive {
		flags |= unix.AT_RECURSIVE
		setFlags |= unix.AT_RECURSIVE
	}
	tree, err := unix.OpenTree(src, "", flags)
	if err != nil {
		return -1, err
	}
	a := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV}
	if u.readOnly && !u.topOnly {
		a.Attr_set |= unix.MOUNT_ATTR_RDONLY
	}
	if ns >= 0 {
		a.Attr_set |= unix.MOUNT_ATTR_IDMAP
		a.Userns_fd = uint64(ns)
	}
	if err := unix.MountSetattr(tree, "", setFlags, &a); err != nil {
		unix.Close(tree)
		return -1, err
	}
	// Read-only on the top mount alone, as its every use asks: the
	// submounts keep their sources' flags (those the host locks too).
	if u.readOnly && u.topOnly {
		if err := setAttr(tree, unix.MOUNT_ATTR_RDONLY, false); err != nil {
			unix.Close(tree)
			return -1, err
		}
	}
	return tree, nil
}

// mappingNamespace returns a descriptor of a new user namespace with the
// given maps. Its only process is a copy of this binary that requested
// PTRACE_TRACEME before its execve, so the kernel stops it with SIGTRAP
// before its first instruction; it is killed once its namespace is open
// (the descriptor keeps the namespace). Its argv and environment are the
// init's with a descriptor that Init refuses, so were it ever let run it
// would exit 125 at once. The thread stays locked meanwhile: a tracee
// whose tracer thread exits runs on.
func mappingNamespace(uids, gids []IDMap) (int, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	p, err := os.StartProcess("/proc/self/exe", []string{InitArgv0}, &os.ProcAttr{
		Env: []string{initFDEnv + "=-1"},
		Sys: &syscall.SysProcAttr{
			Cloneflags:  unix.CLONE_NEWUSER,
			UidMappings: procIDMaps(uids),
			GidMappings: procIDMaps(gids),
			Ptrace:      true,
			Pdeathsig:   syscall.SIGKILL,
		},
	})
	if err != nil {
		return -1, err
	}
	defer func() {
		p.Kill()
		p.Wait()
	}()
	return unix.Open("/proc/"+strconv.Itoa(p.Pid)+"/ns/user", unix.O_RDONLY|unix.O_CLOEXEC, 0)
}

// enter puts the calling thread, the locked spawning thread, in a private
// mount namespace of its own with every copy attached over its source
// (steps 2 and 3 above), and returns what puts it back (step 4). A nil im
// does nothing. Should the way back fail, the thread keeps the private
// namespace until it ends with the sandbox (own never unlocks it, so the
// runtime discards it): a copy of the host's mount table held too long,
// not a mount anyone else sees.
func (im *idMounts) enter() (leave func() error, err error) {
	if im == nil {
		return func() error { return nil }, nil
	}
	defer im.close()
	host, err := unix.Open("/proc/thread-self/ns/mnt", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &SetupError{Step: StepBind, Errno: errnoOf(err), Detail: "id-mapped mounts: open this thread's mount namespace"}
	}
	leave = func() error {
		// Back to the host's: the private namespace has no other
		// process and is freed (the sandbox has its own copy).
		defer unix.Close(host)
		return unix.Setns(host, unix.CLONE_NEWNS)
	}
	fail := func(path, detail string, err error) (func() error, error) {
		leave()
		return nil, &SetupError{Step: StepBind, Path: path, Errno: errnoOf(err), Detail: "id-mapped mount: " + detail}
	}
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		unix.Close(host)
		return nil, &SetupError{Step: StepBind, Errno: errnoOf(err), Detail: "id-mapped mounts: unshare a private mount namespace"}
	}
	// Private first, so that what is attached below never propagates to
	// a peer in the host's namespace (systemd makes / shared).
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fail("/", "make the private mount namespace private", err)
	}
	for i := range im.trees {
		t := &im.trees[i]
		dst, err := unix.Openat2(unix.AT_FDCWD, t.path, &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: noSymlinks})
		if err != nil {
			return fail(t.path, "resolve the source", err)
		}
		var st unix.Stat_t
		err = unix.Fstat(dst, &st)
		if err == nil && idOf(&st) != t.id {
			err = unix.ESTALE
		}
		if err == nil {
			err = unix.MoveMount(t.fd, "", dst, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH)
		}
		unix.Close(dst)
		if err != nil {
			return fail(t.path, "attach over the source", err)
		}
		unix.Close(t.fd)
		t.fd = -1
	}
	return leave, nil
}

// checkMountMaps says whether the Config mount at (its field) is an
// id-mapped bind: a bind with both maps, each one the kernel takes.
func checkMountMaps(at string, m *specs.Mount) (bool, error) {
	if len(m.UIDMappings) == 0 && len(m.GIDMappings) == 0 {
		return false, nil
	}
	if m.Type == MountTmpfs {
		return false, &ConfigError{Field: at + ".uidMappings", Value: "", Reason: "a tmpfs is the sandbox's own; only a bind can be id-mapped"}
	}
	if len(m.UIDMappings) == 0 || len(m.GIDMappings) == 0 {
		return false, &ConfigError{Field: at + ".uidMappings", Value: "", Reason: "an id-mapped bind needs both uidMappings and gidMappings"}
	}
	uids, gids := mountMaps(m)
	if err := checkMap(at+".uidMappings", uids); err != nil {
		return false, err
	}
	if err := checkMap(at+".gidMappings", gids); err != nil {
		return false, err
	}
	return true, nil
}
