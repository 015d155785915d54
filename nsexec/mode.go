package nsexec

// Mode is the rung of the ladder a sandbox runs on (DESIGN.md "Modes"):
// full where the host allows every layer, a named weaker rung where one
// is missing. HostMode decides it once per process; Config.NoProc and
// Config.NoUserNS are how the no-proc and no-userns rungs reach the child.
type Mode string

const (
	// ModeFull is every layer: user, mount, pid, network, ipc and uts
	// namespaces and a procfs of the sandbox's own pid namespace.
	ModeFull Mode = "full"
	// ModeNoProc keeps every namespace but gives the tool no procfs: an
	// empty read-only /proc. It is where the kernel refuses a new procfs,
	// inside a container whose /proc has masked paths (fs/namespace.c
	// mount_too_revealing).
	ModeNoProc Mode = "no-proc"
	// ModeNoUserNS is the rung below no-proc: no user namespace can be
	// made here (UserNSRefused), so the sandbox is a plain child with no
	// namespace, walled by Landlock (the filesystem, TCP, abstract
	// sockets and signals), seccomp, no_new_privs, rlimits, a cgroup
	// where delegated, a fresh environment and workdir (Config.NoUserNS).
	ModeNoUserNS Mode = "no-userns"
)

// Modes lists the rungs, strongest first.
var Modes = []Mode{ModeFull, ModeNoProc, ModeNoUserNS}

// Rank is m's place on the ladder, 0 for the strongest, -1 for a name that
// is none of Modes.
func (m Mode) Rank() int {
	for i, x := range Modes {
		if x == m {
			return i
		}
	}
	return -1
}

// Drops names what full mode promises that m does not keep, or breaks for
// the tool; none for full.
func (m Mode) Drops() []string {
	switch m {
	case ModeNoProc:
		return []string{
			"/proc: the tool's /proc is empty (ps, /proc/self, /dev/fd and /dev/stdin, /dev/stdout, /dev/stderr do not resolve)",
			"sysctls: no namespaced sysctl can be set (they are written through /proc/sys)",
		}
	case ModeNoUserNS:
		return []string{
			"namespaces: none; the tool sees the host's processes and their command lines in /proc, its hostname, SysV IPC and message queues",
			"identity: the tool runs as the launcher's uid, and what it writes is the launcher's",
			"filesystem: Landlock is the wall (read and execute of the system directories, read of a fixed /etc list, the workdir and TMPDIR writable), the tool sees host paths",
			"filter: chmod, chown, xattrs and set*id are refused, in the workdir too, and no socket can be made but a unix stream or seqpacket socketpair (and a TCP one with egress)",
		}
	}
	return nil
}

// NoUserNSEgressDrop is what egress in the no-userns rung (Config.EgressTCP)
// drops of full mode's, where the proxy is the sandbox's only way out.
const NoUserNSEgressDrop = "egress: the tool may open a TCP connection to the proxy's port number on any address it can route to, not to the proxy alone (a Landlock rule names a port, not an address); in full mode the proxy, with its exact allow-list, is the only way out"

// HostnameDrop is what Config.InheritHostname drops of full mode, in any
// rung (HostnameRefused).
const HostnameDrop = "hostname: the sandbox's own uts namespace keeps the launcher's hostname (a seccomp filter around moat refuses sethostname)"
