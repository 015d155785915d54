package cgroups

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// A cgroup at an exact path: an OCI config's linux.cgroupsPath, placed as
// runc's cgroupfs driver places it (libcontainer/cgroups/fs paths.go
// subsysPath): an absolute path below each hierarchy's root, a relative
// one below this process's own group in that hierarchy. The engine reads
// the container's numbers there (podman stats, ctr task metrics, kubelet's
// pod groups), so the container's processes must live exactly there.
//
// Unlike a Manager's leaves the path is the caller's, so it is checked as
// attack surface: no "..", no empty or "." component (PathError); every
// level is reached from the mountpoint by openat2(2) with
// RESOLVE_NO_SYMLINKS|RESOLVE_NO_XDEV, so neither a symlink nor a mount
// on the way (a filesystem that can hold links, mounted over a group by
// root) is followed; and an existing leaf that holds processes or groups
// is refused: moat would write its limits, and later kill everything, in a
// group that is someone else's. What is missing is created, and only what
// was created is removed by Delete (an engine's parent group such as
// podman's libpod_parent or kubelet's kubepods/.../pod<uid> stays).

// pathV1Controllers are the v1 hierarchies a path leaf lives in: a
// Manager's (v1Controllers), devices for the config's device rules, and
// blkio, which engines read for their I/O statistics (podman stats) and
// which takes blockIO.
var pathV1Controllers = []string{"memory", "pids", "cpu", "cpuacct", "freezer", "devices", "blkio"}

// pathV1Optional are the v1 hierarchies a path leaf joins only when its
// resources at create ask for them (cpus or mems, hugepageLimits), and
// which an update can then change. runc joins them always; moat does
// not, because a v1 cpuset group is unusable until its cpus and mems are
// filled (cpusetInherit), and an engine's parent level that exists with
// them empty is not moat's to fill: a container that asks for no cpuset
// is not made to fail on it.
var pathV1Optional = []string{"cpuset", "hugetlb"}

// v1Wants lists the hierarchies a path leaf with the extras e joins.
func v1Wants(e extras) []string {
	ctls := slices.Clone(pathV1Controllers)
	if e.cpus != "" || e.mems != "" {
		ctls = append(ctls, "cpuset")
	}
	if len(e.hugetlb) > 0 {
		ctls = append(ctls, "hugetlb")
	}
	return ctls
}

// pathV2Extra are the v2 controllers a path leaf's parent enables beside
// v2Wanted, for the extras; one that cannot be enabled is refused only
// when the extras ask for it (its file is then missing).
var pathV2Extra = []string{"cpuset", "io", "hugetlb"}

// CreatePath creates the cgroup at path (see above) with the limits of
// res (memory, pids, cpu, the extras runc's cgroupfs driver writes too:
// extras.go, and the device rules of res.Devices, in their order: v1's
// devices files, v2's device program, devfilter_linux.go) and returns it as a Leaf, which Delete
// removes together with the levels CreatePath made. A limit res asks for
// that this host cannot enforce there is a *RequiredError. WithHost and
// WithLogger apply; other options are ignored.
func CreatePath(path string, res *specs.LinuxResources, opts ...Option) (*Leaf, error) {
	c, h, err := pathConfig(path, opts)
	if err != nil {
		return nil, err
	}
	lim, err := limitsFrom(res)
	if err != nil {
		return nil, err
	}
	ext, err := extrasFrom(res)
	if err != nil {
		return nil, err
	}
	var devices []specs.LinuxDeviceCgroup
	if res != nil {
		devices = res.Devices
	}
	var l *Leaf
	switch {
	case h.Layout == V1 || h.Layout == Hybrid:
		l, err = createV1Path(h, path, lim, ext, devices)
	case h.Layout == Unified:
		l, err = createV2Path(h, path, lim, ext, devices, c.log)
	default:
		err = &DelegationError{Reason: "no cgroup filesystem is mounted", Fix: fixHint}
	}
	if err != nil {
		return nil, fmt.Errorf("create cgroup %s: %w", path, err)
	}
	l.log = c.log
	c.log.Debug("cgroup created at cgroupsPath", "path", path, "made", l.made)
	return l, nil
}

// OpenPath opens the cgroup CreatePath made at path, in another process
// perhaps (moat-runtime's monitor holds its create's), with made as
// CreatePath's Leaf.Made reported it. Every entry of made must be a leaf
// directory or one of its ancestors below a mountpoint: nothing else is
// ever removed. It returns an error wrapping os.ErrNotExist when the
// group is gone.
func OpenPath(path string, made []string, opts ...Option) (*Leaf, error) {
	c, h, err := pathConfig(path, opts)
	if err != nil {
		return nil, err
	}
	ctls := slices.Clone(pathV1Controllers)
	if h.Layout != Unified {
		// An optional hierarchy is the leaf's where CreatePath made it.
		for _, c := range pathV1Optional {
			if _, d, err := pathDirsOf(h, path, []string{c}); err == nil && exists(d[0]) {
				ctls = append(ctls, c)
			}
		}
	}
	mounts, dirs, err := pathDirsOf(h, path, ctls)
	if err != nil {
		return nil, fmt.Errorf("open cgroup %s: %w", path, err)
	}
	for i, d := range dirs {
		fd, err := walkBeneath(path, mounts[i], d, false, nil)
		if err != nil {
			return nil, fmt.Errorf("open cgroup %s: %w", path, err)
		}
		unix.Close(fd)
	}
	for _, m := range made {
		ok := false
		for i, d := range dirs {
			if m == d || (strings.HasPrefix(d, m+"/") && strings.HasPrefix(m, mounts[i]+"/")) {
				ok = true
			}
		}
		if !ok {
			return nil, fmt.Errorf("open cgroup %s: %w", path, &PathError{Path: path, Reason: m + " is not a level of this path: it is not moat's to remove"})
		}
	}
	l := &Leaf{id: path, log: c.log, made: slices.Clone(made), atPath: true}
	if h.Layout == Unified {
		l.ops = &v2Leaf{dir: dirs[0], fdNum: -1, timeout: killTimeout}
	} else {
		v := &v1Leaf{ctl: map[string]string{}, timeout: killTimeout}
		for _, ctl := range ctls {
			if mnt, ok := h.V1[ctl]; ok {
				i := slices.Index(mounts, mnt)
				if i >= 0 {
					v.ctl[ctl] = dirs[i]
				}
			}
		}
		v.dirs = dirs
		l.ops = v
	}
	return l, nil
}

func pathConfig(path string, opts []Option) (config, *Host, error) {
	var c config
	for _, o := range opts {
		o(&c)
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	if err := CheckPath(path); err != nil {
		return c, nil, err
	}
	h := c.host
	if h == nil {
		var err error
		if h, err = Detect(); err != nil {
			return c, nil, err
		}
	}
	return c, h, nil
}

// pathDirs resolves path in every hierarchy a path leaf lives in
// (pathDirsOf the pathV1Controllers).
func pathDirs(h *Host, path string) (mounts, dirs []string, err error) {
	return pathDirsOf(h, path, pathV1Controllers)
}

// pathDirsOf resolves path in the v1 hierarchies ctls name, or in the v2
// one: the distinct mountpoints (co-mounted controllers share one) and
// the leaf's directory below each, sorted by directory.
func pathDirsOf(h *Host, path string, ctls []string) (mounts, dirs []string, err error) {
	type pair struct{ mount, dir string }
	var ps []pair
	add := func(mount, self string) error {
		base := mount
		if !filepath.IsAbs(path) {
			if self == "" {
				return &PathError{Path: path, Reason: "is relative, and this process's own group is not visible under " + mount + " (a relative path is resolved below it)"}
			}
			base = self
		}
		d := filepath.Join(base, path)
		for _, p := range ps {
			if p.dir == d {
				return nil
			}
		}
		ps = append(ps, pair{mount, d})
		return nil
	}
	if h.Layout == Unified {
		if err := add(h.Unified, h.SelfUnified); err != nil {
			return nil, nil, err
		}
	} else {
		for _, ctl := range ctls {
			if mnt, ok := h.V1[ctl]; ok {
				if err := add(mnt, h.Self[ctl]); err != nil {
					return nil, nil, err
				}
			}
		}
	}
	if len(ps) == 0 {
		return nil, nil, &DelegationError{Reason: "no cgroup hierarchy moat uses is mounted", Fix: fixHint}
	}
	slices.SortFunc(ps, func(a, b pair) int { return strings.Compare(a.dir, b.dir) })
	for _, p := range ps {
		mounts, dirs = append(mounts, p.mount), append(dirs, p.dir)
	}
	return mounts, dirs, nil
}

// resolveHow reaches each level of a path leaf: no symlink and no other
// mount on the way (openat2(2), RESOLVE_NO_SYMLINKS and RESOLVE_NO_XDEV),
// one component at a time from the mountpoint.
var resolveHow = unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
	Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_XDEV | unix.RESOLVE_NO_MAGICLINKS}

// walkBeneath opens dir, a directory below mount, one component at a time
// with resolveHow; with create it makes a missing component first and
// appends it to made. It returns an O_PATH fd of dir.
func walkBeneath(path, mount, dir string, create bool, made *[]string) (int, error) {
	rel, err := filepath.Rel(mount, dir)
	if err != nil || rel == "." || strings.HasPrefix(rel, "..") {
		return -1, &PathError{Path: path, Reason: dir + " is not below the hierarchy's mountpoint " + mount}
	}
	fd, err := unix.Open(mount, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, &os.PathError{Op: "open", Path: mount, Err: err}
	}
	at := mount
	for _, comp := range strings.Split(rel, "/") {
		at = filepath.Join(at, comp)
		if create {
			switch err := unix.Mkdirat(fd, comp, 0o755); {
			case err == nil:
				*made = append(*made, at)
			case !errors.Is(err, unix.EEXIST):
				unix.Close(fd)
				return -1, &os.PathError{Op: "mkdir", Path: at, Err: err}
			}
		}
		how := resolveHow
		next, err := unix.Openat2(fd, comp, &how)
		unix.Close(fd)
		switch {
		case errors.Is(err, unix.ELOOP) || errors.Is(err, unix.EXDEV) || errors.Is(err, unix.ENOTDIR):
			return -1, &PathError{Path: path, Reason: at + " is not a group of the cgroup hierarchy (a symlink, a mount or a file); moat follows neither"}
		case err != nil:
			return -1, &os.PathError{Op: "open", Path: at, Err: err}
		}
		fd = next
	}
	return fd, nil
}

// claim checks that a leaf directory that existed already is free: no
// process and no group in it.
func claim(path, dir string) error {
	pids, err := readPids(dir)
	if err != nil {
		return err
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	sub := slices.ContainsFunc(ents, func(e os.DirEntry) bool { return e.IsDir() })
	if len(pids) > 0 || sub {
		return &PathError{Path: path, Reason: dir + " exists and holds processes or groups moat did not create: it is someone else's; give the container a group of its own"}
	}
	return nil
}

// makePath creates (or claims) the leaf directory below each mount and
// returns what it made, shallowest first per hierarchy; on an error it
// removes what it made.
func makePath(path string, mounts, dirs []string) ([]string, error) {
	var made []string
	for i, d := range dirs {
		n := len(made)
		fd, err := walkBeneath(path, mounts[i], d, true, &made)
		if err == nil {
			unix.Close(fd)
			if len(made) == n || made[len(made)-1] != d {
				err = claim(path, d)
			}
		}
		if err != nil {
			removePathDirs(made, dirs)
			return nil, err
		}
	}
	return made, nil
}

// removePathDirs removes, deepest first, the directories a path leaf made:
// a leaf directory must go (rmdir retries the kernel's deferred EBUSY);
// a level above it that another group still uses stays (removeMade).
func removePathDirs(made, leafDirs []string) error {
	var errs []error
	sorted := slices.Clone(made)
	// Deepest first: a longer path below a shorter one sorts after it.
	slices.SortFunc(sorted, func(a, b string) int { return len(b) - len(a) })
	for _, d := range sorted {
		if slices.Contains(leafDirs, d) {
			errs = append(errs, rmdir(d))
		} else {
			errs = append(errs, removeMade([]string{d}))
		}
	}
	return errors.Join(errs...)
}

// requireAt refuses a limit lim asks for whose controller has no
// directory here.
func requireAt(path string, lim limits, have func(Limit) string) error {
	for _, k := range []Limit{Memory, Pids, CPU} {
		if !lim.want(k) {
			continue
		}
		if why := have(k); why != "" {
			return &RequiredError{Limit: k, Reason: "linux.cgroupsPath " + path + ": " + why, Fix: fixHint}
		}
	}
	return nil
}

func createV1Path(h *Host, path string, lim limits, ext extras, devices []specs.LinuxDeviceCgroup) (*Leaf, error) {
	ctls := v1Wants(ext)
	mounts, dirs, err := pathDirsOf(h, path, ctls)
	if err != nil {
		return nil, err
	}
	v := &v1Leaf{ctl: map[string]string{}, dirs: dirs, timeout: killTimeout}
	for _, ctl := range ctls {
		if mnt, ok := h.V1[ctl]; ok {
			v.ctl[ctl] = dirs[slices.Index(mounts, mnt)]
		}
	}
	err = requireAt(path, lim, func(k Limit) string {
		if _, ok := v.ctl[k.String()]; !ok {
			return "no cgroup v1 " + k.String() + " hierarchy is mounted"
		}
		return ""
	})
	if err == nil {
		// Refused before any level is made: a controller no v1 hierarchy
		// here has (on a hybrid host, perhaps one its cgroup2 mount has).
		err = ext.lacking(false, func(c string) bool { _, ok := v.ctl[c]; return ok }, func(n need) string { return v1Absent(h, n) })
	}
	if err == nil && len(devices) > 0 && v.ctl["devices"] == "" {
		err = &PathError{Path: path, Reason: "linux.resources.devices needs the cgroup v1 devices hierarchy, which is not mounted"}
	}
	if err != nil {
		return nil, err
	}
	made, err := makePath(path, mounts, dirs)
	if err != nil {
		return nil, err
	}
	if d := v.ctl["cpuset"]; d != "" {
		err = inheritCpusets(made, h.V1["cpuset"], d)
	}
	memsw := v.ctl["memory"] != "" && exists(filepath.Join(v.ctl["memory"], "memory.memsw.limit_in_bytes"))
	if err == nil {
		err = v.set(lim, memsw)
	}
	if err == nil {
		err = setV1Extras(v.ctl, ext)
	}
	if err == nil && len(devices) > 0 {
		err = setDevices(v.ctl["devices"], devices)
	}
	if err != nil {
		removePathDirs(made, dirs)
		return nil, err
	}
	return &Leaf{id: path, ops: v, made: made, atPath: true}, nil
}

// setDevices writes the device rules in their order (devices.txt,
// "devices.allow" and "devices.deny"): a rule of type "a" resets the
// group to allow-all or deny-all and drops the exceptions, every other
// adds one.
func setDevices(dir string, rules []specs.LinuxDeviceCgroup) error {
	for _, r := range rules {
		file := "devices.deny"
		if r.Allow {
			file = "devices.allow"
		}
		if err := writeFile(dir, file, deviceRule(r)); err != nil {
			return fmt.Errorf("linux.resources.devices %q: %w", deviceRule(r), err)
		}
	}
	return nil
}

// deviceRule is one rule as the v1 devices files take it: "TYPE MAJOR:MINOR
// ACCESS", with * for an absent or -1 number and rwm for no access.
func deviceRule(r specs.LinuxDeviceCgroup) string {
	num := func(p *int64) string {
		if p == nil || *p < 0 {
			return "*"
		}
		return fmt.Sprint(*p)
	}
	typ, access := r.Type, r.Access
	if typ == "" {
		typ = "a"
	}
	if access == "" {
		access = "rwm"
	}
	if typ == "a" {
		return "a"
	}
	return typ + " " + num(r.Major) + ":" + num(r.Minor) + " " + access
}

func createV2Path(h *Host, path string, lim limits, ext extras, devices []specs.LinuxDeviceCgroup, log *slog.Logger) (*Leaf, error) {
	mounts, dirs, err := pathDirs(h, path)
	if err != nil {
		return nil, err
	}
	dir := dirs[0]
	made, err := makePath(path, mounts, dirs)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*Leaf, error) {
		removePathDirs(made, dirs)
		return nil, err
	}
	// Controllers are enabled top-down for the leaf's parent, from the
	// root for an absolute path, from this process's group for a relative
	// one (newV2TreeAt says why the way it is).
	base := h.Unified
	if !filepath.IsAbs(path) {
		base = h.SelfUnified
	}
	levels := []string{base}
	if rel, _ := filepath.Rel(base, filepath.Dir(dir)); rel != "." {
		for _, c := range strings.Split(rel, "/") {
			levels = append(levels, filepath.Join(levels[len(levels)-1], c))
		}
	}
	why := map[string]string{}
	if busy := populatedLevel(levels, h.Unified); busy != "" {
		for _, c := range v2Wanted {
			why[c] = "cannot enable " + c + " below " + busy + ": it holds processes (cgroup v2 no-internal-process rule)"
		}
	} else {
		for _, c := range v2Wanted {
			why[c] = enableDown(levels, c, map[string][]string{})
		}
		for _, c := range pathV2Extra {
			enableDown(levels, c, map[string][]string{})
		}
	}
	if err := requireAt(path, lim, func(k Limit) string { return why[k.String()] }); err != nil {
		return fail(err)
	}
	var enabled []string
	for _, c := range v2Wanted {
		if why[c] == "" {
			enabled = append(enabled, c)
		}
	}
	l := &v2Leaf{dir: dir, fdNum: -1, timeout: killTimeout}
	if err := l.set(lim, enabled); err != nil {
		return fail(err)
	}
	if err := setV2Extras(dir, ext); err != nil {
		return fail(err)
	}
	fd, err := walkBeneath(path, mounts[0], dir, false, nil)
	if err != nil {
		return fail(err)
	}
	l.fdNum = fd
	if len(devices) > 0 {
		// Without CAP_BPF or CAP_SYS_ADMIN no device program loads; as
		// runc does in a user namespace, the rules then go unenforced
		// (the host nodes' own modes still apply) and the log says so.
		var de *DeviceProgramError
		switch err := setDeviceProgram(fd, devices); {
		case errors.As(err, &de) && errors.Is(err, unix.EPERM) && os.Geteuid() != 0:
			log.Warn("linux.resources.devices not enforced: loading a cgroup v2 device program needs CAP_BPF or CAP_SYS_ADMIN", "path", path, "err", err)
		case err != nil:
			unix.Close(fd)
			return fail(fmt.Errorf("linux.resources.devices: %w", err))
		}
	}
	return &Leaf{id: path, ops: l, made: made, atPath: true}, nil
}

// inheritCpusets gives each cpuset level CreatePath made, shallowest
// first, and the leaf itself (claimed, perhaps, and then as empty),
// its parent's cpus and mems (cpusetInherit says why).
func inheritCpusets(made []string, mount, leaf string) error {
	for _, d := range made {
		if d == leaf || !strings.HasPrefix(d, mount+"/") {
			continue
		}
		if err := cpusetInherit(d); err != nil {
			return err
		}
	}
	return cpusetInherit(leaf)
}
