package nsexec

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The no-userns rung (ModeNoUserNS, Config.NoUserNS): where no user
// namespace can be made, the sandbox is a plain child of the launcher, in
// no namespace and with no pivot. The init is spawned as in every rung
// (its own session, the parent-death signal, non-dumpable), and is the
// child subreaper of the tool; it gives the tool
//
//   - the environment it was given, with HOME=/work rewritten to the
//     workdir's host path and TMPDIR set to a per-run 0700 directory the
//     launcher made under /tmp and removes once the init was reaped;
//   - the workdir at its host path as its working directory;
//   - rlimits and umask (hygiene), no capability on any thread and
//     no_new_privs; a root launcher's init also empties the bounding set
//     and locks the securebits (noUserNSDrop);
//   - a cgroup leaf where the caller places it (WithPlacement);
//   - the rung's Landlock domain (nouserns_landlock_linux.go), its own
//     filter (nouserns_filter_linux.go), then the policy's.
//
// Kill: with no pid namespace, nothing ends the sandbox's processes when
// the init goes, so (a) the tool stays in the init's process group, which
// the rung's filter keeps every descendant in (setsid and setpgid are
// refused), and a SIGKILL of the sandbox (Process.Signal) is sent to that
// group, ending the init and every descendant at once; (b) when the tool
// exits the init, their subreaper, kills each child it has until it has
// none (endDescendants), so a background grandchild ends with the run;
// (c) the tool has the parent-death signal, for an init killed by other
// means.

// noUserNSTmpRoot is where the launcher makes each run's TMPDIR.
var noUserNSTmpRoot = "/tmp"

// checkNoUserNS refuses what the rung cannot give (normalize).
func checkNoUserNS(c *Config) error {
	bad := func(field, value, reason string) error {
		return &ConfigError{Field: field, Value: value, Reason: reason + " (mode " + string(ModeNoUserNS) + ": no namespaces)"}
	}
	switch {
	case c.Rootfs != "":
		return bad("rootfs", c.Rootfs, "needs a mount namespace; the tool sees the host's root")
	case c.Egress != nil:
		return &EgressModeError{Mode: ModeNoUserNS}
	case c.EgressTCP != 0 && landlockABI() < NoUserNSEgressABI:
		return &EgressModeError{Mode: ModeNoUserNS, Need: NoUserNSEgressABI, Have: landlockABI()}
	case c.Sysfs:
		return bad("sysfs", "true", "needs a mount namespace")
	case c.Mqueue:
		return bad("mqueue", "true", "needs an ipc namespace")
	case len(c.Sysctl) > 0:
		return bad("sysctl", sortedKeys(c.Sysctl)[0], "needs namespaces of its own")
	case len(c.MaskedPaths) > 0 || len(c.ReadonlyPaths) > 0:
		return bad("maskedPaths", strings.Join(append(c.MaskedPaths, c.ReadonlyPaths...), ","), "needs a mount namespace")
	case c.Caps != nil && !c.Caps.empty():
		return bad("caps", "set", "grants capabilities of the host's user namespace")
	case len(c.Groups) > 0:
		return bad("groups", "set", "the tool keeps the launcher's ids")
	case c.Terminal:
		return bad("terminal", "true", "needs a session of the tool's own, which the rung's filter keeps every process out of")
	case c.CgroupNS:
		return bad("cgroupNS", "true", "needs a cgroup namespace")
	case c.Cwd != "" && c.Workdir == "":
		return bad("cwd", c.Cwd, "is a path inside a sandbox's root; without a workdir the tool starts in /")
	}
	if _, ok := noUserNSFilter(c.EgressTCP != 0); !ok {
		return bad("noUserNS", "true", "has no filter written for this architecture")
	}
	for i, m := range c.Mounts {
		if m.Type == MountTmpfs {
			return bad("mounts["+strconv.Itoa(i)+"]", m.Destination, "a tmpfs needs a mount namespace")
		}
		if len(m.UIDMappings) > 0 || len(m.GIDMappings) > 0 {
			return bad("mounts["+strconv.Itoa(i)+"]", m.Destination, "an id-mapped mount needs a mount namespace")
		}
		if filepath.Clean(m.Destination) != filepath.Clean(m.Source) {
			return bad("mounts["+strconv.Itoa(i)+"]", m.Destination, "the tool sees "+m.Source+" at its host path; bind it at that same path")
		}
	}
	c.UID, c.GID, c.ExactIDs = uint32(os.Geteuid()), uint32(os.Getegid()), true
	c.Caps, c.Network = nil, NetworkNone
	return nil
}

// EgressModeError refuses egress in a rung that cannot hold it. In
// no-userns the tool shares the host's network: the unix socket of full
// mode's forwarder (Config.Egress) is refused there, and the rung's own
// (Config.EgressTCP, a TCP connect to the proxy's loopback port) needs
// Landlock's TCP rules, ABI Need (NoUserNSEgressABI), where this kernel
// has ABI Have; Need is 0 for the forwarder's refusal.
type EgressModeError struct {
	Mode       Mode
	Need, Have int
}

func (e *EgressModeError) Error() string {
	if e.Need > 0 {
		return fmt.Sprintf("nsexec: egress in mode %s needs Landlock ABI %d or later (TCP connect rules: Linux 6.7), and this kernel has ABI %d: the tool shares the host's network, whose only wall is Landlock's TCP rules and the rung's filter; run without egress, or where user namespaces are allowed", e.Mode, e.Need, e.Have)
	}
	return "nsexec: egress through a forwarder's unix socket is not supported in mode " + string(e.Mode) + " (the tool shares the host's network, whose only wall is Landlock's TCP rules and the rung's filter); use EgressTCP, the proxy's loopback port, or run where user namespaces are allowed"
}

// NoUserNSEgressABI is the lowest Landlock ABI the no-userns rung has
// egress on: 4, the first that handles TCP bind and connect
// (LANDLOCK_ACCESS_NET_*). A variable so that tests can raise it.
var NoUserNSEgressABI = 4

// spawnNoUserNS is spawn for the rung: no mapping, no namespace to join,
// a TMPDIR of the run's own.
func spawnNoUserNS(ctx context.Context, c *Config, stdio Stdio, o *options, deferred bool) (*Process, *os.File, error) {
	if err := CheckNoUserNS(); err != nil {
		return nil, nil, err
	}
	if len(o.joins) > 0 {
		return nil, nil, errors.New("nsexec: WithJoin needs namespaces, and mode " + string(ModeNoUserNS) + " has none")
	}
	tmp, err := os.MkdirTemp(noUserNSTmpRoot, "moat-tmp-")
	if err != nil {
		return nil, nil, &SetupError{Step: StepTmp, Path: noUserNSTmpRoot, Errno: errnoOf(err), Detail: "the run's TMPDIR (mode " + string(ModeNoUserNS) + ")"}
	}
	if real, err := filepath.EvalSymlinks(tmp); err == nil {
		tmp = real // the child opens it with no link in its path
	}
	o.noTail = true    // the Go init supervises, under the rung's filter
	o.ownerMap = false // no mount, so no id-mapped one
	o.tmpDir = tmp
	prev := o.after
	o.after = func() {
		removeTmp(tmp)
		if prev != nil {
			prev()
		}
	}
	m := &mapping{id: Identity{UID: c.UID, GID: c.GID}}
	return spawnAs(ctx, c, stdio, o, deferred, m, nil)
}

// removeTmp removes a run's TMPDIR, the tool's files in it too: they are
// the launcher's own, but a directory the tool made without the search
// or write permission (mkdir with mode 0; chmod is refused) is opened up
// first.
func removeTmp(dir string) {
	if os.RemoveAll(dir) == nil {
		return
	}
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if d != nil && d.IsDir() {
			os.Chmod(p, 0o700)
		}
		return nil
	})
	os.RemoveAll(dir)
}

// noUserNSEnv is the tool's environment: env, with HOME=/work made the
// workdir's host path and TMPDIR the run's own.
func noUserNSEnv(env []string, workdir, tmp string) []string {
	out := make([]string, 0, len(env)+1)
	for _, kv := range env {
		switch {
		case kv == "HOME=/work" && workdir != "":
			kv = "HOME=" + workdir
		case strings.HasPrefix(kv, "TMPDIR="):
			continue
		}
		out = append(out, kv)
	}
	return append(out, "TMPDIR="+tmp)
}

// openSource opens path, a host path the parent resolved and opened,
// and checks it is still that inode (want), as cloneSource does for a
// bind (mount_linux.go): what the rule is put on is what the parent
// checked, whatever was renamed or linked in between. The inode check is
// the guarantee, so a plain open(2) does (openat2 is refused by the
// filter of a moat sandbox this one may be nested in).
func openSource(path string, want *fileID) (int, error) {
	if want == nil {
		return -1, unix.EPROTO
	}
	fd, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return -1, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || idOf(&st) != *want {
		unix.Close(fd)
		return -1, unix.ESTALE
	}
	return fd, nil
}

// holdWorkdir opens the workdir the parent checked, before the tool's
// cwd is set: the rung's Landlock rule is put on this descriptor, and
// the tool's HOME is its path at the exec (workdirPath), since a pooled
// sandbox's workdir is renamed to the dispatch's between the two
// (executor/native's swapWorkdir), as a bind would follow the inode.
func (c *child) holdWorkdir() error {
	if c.cfg.Workdir == "" {
		return nil
	}
	fd, err := openSource(c.cfg.Workdir, c.srcs.Workdir)
	if err != nil {
		return stepErr(StepBind, c.cfg.Workdir, "workdir (mode "+string(ModeNoUserNS)+")", err)
	}
	c.workdirFD = fd
	return nil
}

// workdirPath is the held workdir's path now.
func (c *child) workdirPath() (string, error) {
	p, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(c.workdirFD))
	if err != nil || !filepath.IsAbs(p) {
		return "", stepErr(StepCwd, c.cfg.Workdir, "the workdir's path now", unix.ENOENT)
	}
	return p, nil
}

// noUserNSCwd is the tool's working directory: Cwd (given as a path
// inside /work) at the workdir's host path, the workdir, or /.
func noUserNSCwd(cfg *Config) string {
	if cfg.Workdir == "" {
		return "/"
	}
	if rel, ok := strings.CutPrefix(cfg.Cwd, "/work"); ok && (rel == "" || rel[0] == '/') {
		return cfg.Workdir + rel
	}
	return cfg.Workdir
}

// noUserNSDrop leaves every thread of the init with no capability and
// no_new_privs. A root launcher's init (uid 0 of the initial namespace,
// or of a container's) also empties the bounding set, clears its
// supplementary groups and locks the securebits, so that neither the
// tool nor anything it execs (a setuid-root binary, under no_new_privs
// anyway) holds or regains a capability as uid 0 (capabilities(7),
// SECBIT_NOROOT). Another launcher has none of these to drop (they need
// CAP_SETPCAP); its calls are the ones no privilege is needed for.
func (c *child) noUserNSDrop() error {
	if _, err := unix.PrctlRetInt(unix.PR_CAPBSET_READ, unix.CAP_SETPCAP, 0, 0, 0); err == nil && unix.Geteuid() == 0 {
		calls, target, err := privilegeDrop(c.cfg.UID, c.cfg.GID, nil, setgroupsAllowed(), nil, broadcastBounding)
		if err != nil {
			return err
		}
		if !broadcastBounding {
			if err := onThisThread(boundingCalls(target.lastCap, nil)); err != nil {
				return err.setupErr()
			}
		}
		if terr := onEveryThread(calls, target); terr != nil {
			return terr.setupErr()
		}
		return nil
	}
	setCapsWant(nil)
	calls := []threadCall{
		{nr: unix.SYS_PRCTL, args: [5]uintptr{unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL}, what: "clear ambient"},
		{nr: unix.SYS_CAPSET, args: [5]uintptr{uintptr(unsafe.Pointer(&capsWant.hdr)), uintptr(unsafe.Pointer(&capsWant.data[0]))}, what: "capset"},
		{nr: unix.SYS_PRCTL, args: [5]uintptr{unix.PR_SET_NO_NEW_PRIVS, 1}, what: "no_new_privs", step: StepNoNewPrivs},
	}
	if terr := onEveryThread(calls, nil); terr != nil {
		return terr.setupErr()
	}
	return nil
}

// setgroupsAllowed says whether this process's user namespace allows
// setgroups(2) (user_namespaces(7): a container's may deny it, and then
// the supplementary groups stay as they are). Read with raw calls: an
// os.File would make the Go runtime's epoll descriptor, which the init's
// closeAbove would then close under it (pid1_linux.go startTool).
func setgroupsAllowed() bool {
	fd, err := unix.Open("/proc/self/setgroups", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return true // no user namespace: the initial one allows it
	}
	defer unix.Close(fd)
	var b [16]byte
	n, _ := unix.Read(fd, b[:])
	return n > 0 && strings.TrimSpace(string(b[:n])) == "allow"
}

// noUserNSToolAttr is the tool's SysProcAttr in the rung: in the init's
// process group (no setsid), with the parent-death signal.
func noUserNSToolAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
