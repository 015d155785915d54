// Package nsexec starts a tool program in a fresh sandbox: new user, mount,
// pid, network, IPC and UTS namespaces created at clone time, a private root
// built from read-only binds, a masked /proc, a minimal /dev, a size-capped
// /tmp and a read-write /work, with every capability dropped, no_new_privs
// set and an optional seccomp filter installed just before the tool is
// started. The init stays pid 1 of the pid namespace and the tool is its
// only child: the init forwards every catchable signal to it, reaps, and
// ends with it, reporting the tool's own status; it dies with its launcher
// (a sandbox prepared WithHandover, with whichever process holds its sync
// socket: Pending.Detach hands it over, Adopt takes it). The launcher that
// holds it may have it fork more processes beside the tool (Adopted.Exec),
// which inherit the tool's namespaces, cgroup, filter and credentials.
// A pod's sandbox may instead be born in the network, IPC, UTS, pid or
// cgroup namespace of another (WithJoin; never one of the host's); in a
// joined pid namespace the init is not pid 1 and ends what the tool leaves
// behind itself.
//
// The sandbox child is a re-exec of the running binary (or of the binary
// named by WithInitPath). That binary must call Init first in main, and every
// TestMain that starts sandboxes must do the same:
//
//	func main() {
//		nsexec.Init()
//		...
//	}
//
// Init recognises the child by two signals, the argv[0] sentinel InitArgv0
// and the environment variable naming the config descriptor; in any other
// process it returns at once. In the child it never returns: it runs the
// tool and exits with its status, or reports a SetupError to the parent and
// exits 125.
//
// # Identity
//
// Host root is never mapped into the sandbox. Exactly one id is mapped: the
// configured inside uid (and gid) onto one host id. Rootless, that host id is
// the caller's own effective uid and gid. As root it is the Identity given
// with WithIdentity (SubordinateIdentity reads one from /etc/subuid and
// /etc/subgid), else an id of the sandbox's own from HostIDFirst up
// (HostIDCount of them, held by a lock file in HostIDLockDir while the
// sandbox runs), dedicated unprivileged ids outside the ranges systemd
// assigns, so that an escape lands as nobody in particular and no two
// running sandboxes share a host id.
//
// WithHostRange maps a range instead (HostRangeSize ids, 0 up inside; as
// root a block of the range space of the sandbox's own, held by a lock
// file in HostRangeLockDir), for images of several users. The containers
// of a pod share one block: WithSharedRange maps a sandbox onto the block
// whose lock a descriptor holds (a copy of the pod's, Process.ShareLease
// or Adopted.ShareLease), after checking it is a held lock of the range
// space (ErrNotRangeLease otherwise), and keeps its copy while it runs,
// so the block is the pod's until the last of its sandboxes has ended.
// WithIDMaps takes a caller's own maps, outside moat's reserved spaces.
//
// The init gets the capabilities it needs for the setup (mounts, hostname,
// loopback, the privilege drop itself) as ambient capabilities in its own user
// namespace, because its uid inside is the non-zero tool uid and a single-id
// map leaves no other uid to switch to. Before the exec it clears every set,
// the bounding set included, and locks the securebits, so the tool holds
// nothing and cannot regain anything.
//
// The kernel must have openat2 (5.6), close_range (5.9) and mount_setattr
// (5.12); the mount tree is built with the fd-based mount API so every target
// is resolved beneath the new root.
package nsexec
