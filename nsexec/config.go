package nsexec

import (
	"os"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// ConfigVersion is the version of the Config wire format. The child refuses a
// config of another version, so a parent and an init binary of different
// builds fail loudly instead of half-applying a policy.
const ConfigVersion = 20 // 2: the wire's tasks (WithCgroupTasks); 3: its sources; 4: the init stays pid 1; 5: egress; 6: Cwd, ExactIDs; 7: the binary request (the C tail); 8: Groups, Caps, id-mapped mounts; 9: a writable root, sysfs, mqueue, sysctls, masks, joined namespaces; 10: handover and exec; 11: the tool check (WithToolCheck); 12: Terminal, the exec request's flags; 13: Umask; 14: ReadOnlyTopOnly; 15: Landlock; 16: NoProc, InheritHostname; 17: RootfsPropagation, Devices; 18: NoUserNS; 19: the wire's Reuse; 20: EgressTCP

// Network modes.
const (
	NetworkNone     = "none"     // only lo, left down
	NetworkLoopback = "loopback" // only lo, brought up
)

// Defaults applied by Start to zero fields.
const (
	DefaultUID      = 1000
	DefaultGID      = 1000
	DefaultHostname = "moat"
	DefaultTmpSize  = 64 << 20
)

// Config is everything the sandbox child needs. It travels as JSON over the
// sync socket in one frame; it is data only.
type Config struct {
	// Version must be ConfigVersion (or zero, which Start fills in).
	Version int `json:"version"`
	// Rootfs is a host directory used as the root, read-only unless
	// RootfsWritable. Empty means host mode: a tmpfs root with read-only
	// binds of the host system directories and a minimal /etc. In a
	// rootfs, /proc, /dev, /tmp, /work and every extra mount target must
	// already exist; the rootfs is never modified.
	Rootfs string `json:"rootfs,omitempty"`
	// RootfsWritable binds Rootfs read-write (still nosuid and nodev)
	// instead of read-only: an OCI config's root.readonly false. The
	// rootfs is still never modified by moat itself.
	RootfsWritable bool `json:"rootfsWritable,omitempty"`
	// RootfsPropagation is the propagation of / once the root is built
	// (one of RootfsPropagations; empty: private), an OCI config's
	// linux.rootfsPropagation. Every mount of the sandbox is private
	// before it is cloned, so a shared / has peers inside only
	// (propagation_linux.go).
	RootfsPropagation string `json:"rootfsPropagation,omitempty"`
	// Mounts are extra binds and tmpfs mounts (parseMount lists the
	// options): Source on the host, Destination inside; a bind is
	// read-only unless it says "rw". A bind with UIDMappings and
	// GIDMappings is an id-mapped mount of its source (idmount_linux.go):
	// the source's files owned by ContainerID show as owned by HostID.
	Mounts []specs.Mount `json:"mounts,omitempty"`
	// ReadOnlyTopOnly makes a bind's "ro" read-only on its top mount
	// only, as runc's "ro" is (an OCI config's): its submounts keep their
	// own flags, and "rro" is what makes every mount of the tree
	// read-only. Unset, "ro" and "rro" are both recursive, moat's rule
	// for moat run and the library. A bind's top mount is read-only
	// either way, and the tool cannot make it writable (mount_linux.go
	// cloneBind says why).
	ReadOnlyTopOnly bool `json:"readOnlyTopOnly,omitempty"`
	// Devices are host device nodes bound into the sandbox's /dev (Device
	// says how, and why the host's owner and mode stay).
	Devices []Device `json:"devices,omitempty"`
	// Sysfs mounts a read-only sysfs at /sys, which must exist in the
	// root: the kernel gives a sandbox one of its own network namespace
	// only (not with a joined one, WithJoin).
	Sysfs bool `json:"sysfs,omitempty"`
	// Mqueue mounts the POSIX message queues of the sandbox's own ipc
	// namespace at /dev/mqueue (not with a joined one).
	Mqueue bool `json:"mqueue,omitempty"`
	// Sysctl are namespaced sysctls (SysctlKind) the init writes in the
	// sandbox's own ipc and network namespaces before the tool starts.
	Sysctl map[string]string `json:"sysctl,omitempty"`
	// MaskedPaths are paths inside the sandbox covered once the mount tree
	// is built, as runc covers them: a file by a bind of /dev/null, a
	// directory by an empty read-only tmpfs; ReadonlyPaths are bound
	// read-only onto themselves. A path that does not exist is skipped.
	// moat's own /proc masking (ProcMasking) applies either way.
	MaskedPaths   []string `json:"maskedPaths,omitempty"`
	ReadonlyPaths []string `json:"readonlyPaths,omitempty"`
	// Network is NetworkNone (the default) or NetworkLoopback.
	Network string `json:"network,omitempty"`
	// Egress, with NetworkLoopback, has the init relay connections to
	// 127.0.0.1:Egress.Port to the unix socket at Egress.Socket (a bind in
	// Mounts), where the host's egress proxy listens (egress_linux.go).
	Egress *Egress `json:"egress,omitempty"`
	// UID and GID are the identity of the tool inside the sandbox. When both
	// are zero they become DefaultUID and DefaultGID (so uid 0 inside can only
	// be had with a non-zero GID or ExactIDs; it would hold no capability
	// either way).
	UID uint32 `json:"uid"`
	GID uint32 `json:"gid"`
	// ExactIDs keeps UID and GID as given, 0:0 included (an OCI config's
	// process.user): the ids inside are the mapping's inside side only; the
	// host side is never root either way.
	ExactIDs bool `json:"exactIDs,omitempty"`
	// Groups are the tool's supplementary groups inside (setgroups(2)), an
	// OCI config's process.user.additionalGids. Each must be mapped; they
	// can only be set where the sandbox's user namespace allows setgroups
	// (as root; rootless it must deny it before its gid map is written,
	// user_namespaces(7)), else Start refuses them. Empty: none (as root;
	// rootless the caller's own stay, as with every rootless sandbox).
	Groups []uint32 `json:"groups,omitempty"`
	// Caps are the tool's capability sets, inside its user namespace
	// only (caps.go). Nil: none, and the securebits locked.
	Caps *Capabilities `json:"caps,omitempty"`
	// Cwd is the tool's working directory inside the sandbox, an absolute,
	// clean path that must exist in the new root. Empty means /work when
	// Workdir is set, else /.
	Cwd string `json:"cwd,omitempty"`
	// Hostname inside the UTS namespace (default DefaultHostname).
	Hostname string `json:"hostname,omitempty"`
	// TmpSize is the size cap of the /tmp tmpfs in bytes (default
	// DefaultTmpSize).
	TmpSize int64 `json:"tmpSize,omitempty"`
	// Umask is the tool's file mode creation mask (umask(2)), 0 to 0777;
	// nil means 022. The init sets it as its own last thing before the
	// tool: the tool, every process exec'd into the sandbox (forked by the
	// init) and the C tail (exec'd by the Go init: execve keeps the umask)
	// all start with it.
	Umask *uint32 `json:"umask,omitempty"`
	// Rlimits are set as given; RLIMIT_CORE is 0 (soft and hard) unless
	// they name it.
	Rlimits []specs.POSIXRlimit `json:"rlimits,omitempty"`
	// Seccomp is a marshalled seccomp.Program, loaded last, just before the
	// exec. Empty means no filter.
	Seccomp []byte `json:"seccomp,omitempty"`
	// Args is the tool argv. Args[0] is a path inside the sandbox, or a bare
	// name looked up in the PATH of Env inside the new root (a default PATH
	// when Env has none).
	Args []string `json:"args"`
	// Terminal: the tool's stdin is a terminal (a pty's slave) that
	// becomes its controlling terminal, as runc gives process.terminal:
	// the init forks the tool in a session of its own (setsid) and makes
	// stdin that session's terminal (TIOCSCTTY), whose foreground process
	// group is then the tool's, so the terminal's ^C, ^Z and ^\ reach it,
	// a shell has job control and /dev/tty opens. A stdin that is no
	// terminal fails the exec (ENOTTY).
	Terminal bool `json:"terminal,omitempty"`
	// Landlock puts the tool in a Landlock domain (landlock(7), Linux
	// 5.13+) as a second wall behind the mount namespace: every
	// filesystem right the kernel's ABI knows is handled, and granted
	// beneath the sandbox's own root only, so a file or directory of the
	// host that the tool reaches by any other way (a descriptor a host
	// process passes it, a kernel bug that escapes the mount namespace)
	// opens, executes, is written, linked or renamed into nowhere. The
	// mount tree still decides what is read-only. A kernel without
	// Landlock fails the setup (StepLandlock); LandlockABI tells first.
	Landlock bool `json:"landlock,omitempty"`
	// NoProc gives the tool an empty read-only /proc instead of a procfs
	// (ModeNoProc, what HostMode says where the kernel refuses a new one);
	// every namespace stays. It has no Sysctl, which is written through
	// the procfs, and joins no pid namespace.
	NoProc bool `json:"noProc,omitempty"`
	// NoUserNS runs the tool in the no-userns rung (ModeNoUserNS,
	// nouserns_linux.go): a plain child in no namespace, walled by
	// Landlock (ABI NoUserNSMinABI or later, else *LandlockABIError),
	// the rung's seccomp filter and the policy's, no_new_privs, rlimits
	// and a fresh environment, in the workdir at its host path with a
	// TMPDIR of its own. The tool runs as the launcher's uid and gid
	// (UID and GID are set to them); Rootfs, Egress (its egress is
	// EgressTCP), tmpfs mounts and
	// every field that needs a namespace are refused, and a bind is seen
	// at its host path (its Destination must be its Source).
	NoUserNS bool `json:"noUserNS,omitempty"`
	// EgressTCP, in the no-userns rung only, is the one TCP port the tool
	// may connect to (the proxy's on 127.0.0.1, egress.Proxy.OpenLoopback),
	// 0 for none: the rung's Landlock domain allows a TCP connect to that
	// port and binds nowhere (ABI NoUserNSEgressABI or later, else
	// *EgressModeError), and the rung's filter lets TCP stream sockets be
	// made, and nothing else of the network (nouserns_filter_linux.go). A
	// Landlock rule names a port, not an address: the tool can reach that
	// port number on any host it can route to.
	EgressTCP uint16 `json:"egressTCP,omitempty"`
	// InheritHostname leaves the sandbox's own uts namespace with the
	// launcher's hostname instead of Hostname: where a seccomp filter
	// around moat refuses sethostname (HostnameRefused), as a container
	// engine's default profile does without CAP_SYS_ADMIN.
	InheritHostname bool `json:"inheritHostname,omitempty"`
	// Env is the complete environment of the tool.
	Env []string `json:"env"`
	// Workdir is a host directory bound read-write at /work, which is the
	// tool's working directory. Empty means nothing is bound at /work and
	// the working directory is /.
	Workdir string `json:"workdir,omitempty"`
	// CgroupNS unshares the cgroup namespace after the parent has placed the
	// child in its cgroup (after WithPlacement ran, or at clone time with
	// WithCgroupFD).
	CgroupNS bool `json:"cgroupNS,omitempty"`
}

// Egress is where the init's egress forwarder listens and what it relays to.
type Egress struct {
	Port   uint16 `json:"port"`   // on 127.0.0.1 inside the sandbox
	Socket string `json:"socket"` // absolute path inside the sandbox
}

// Stdio holds the files the tool gets as descriptors 0, 1 and 2. A nil
// member is replaced by /dev/null.
type Stdio struct {
	Stdin, Stdout, Stderr *os.File
}

// wire is the frame the parent sends: the Config plus what only the parent
// knows about the id mapping.
type wire struct {
	Config *Config `json:"config"`
	// SetGroups is set when the parent allowed setgroups in the child's
	// user namespace (as root, or root of a rootless engine's namespace
	// that allows it), so the child sets the supplementary groups to
	// Config.Groups, clearing those it inherited (rootless, setgroups is
	// denied and the caller's own groups stay, as with every rootless
	// sandbox).
	SetGroups bool `json:"setGroups,omitempty"`
	// Trace asks the child for its stage marks (WithTrace).
	Trace bool `json:"trace,omitempty"`
	// Deferred makes the child stop before the exec, say msgReady and wait
	// for a request frame with the argv, the environment and the stdio
	// descriptors (Prepare).
	Deferred bool `json:"deferred,omitempty"`
	// Tasks is how many cgroup v1 "tasks" files the child got as
	// descriptors 4 and up (WithCgroupTasks).
	Tasks int `json:"tasks,omitempty"`
	// Tail says the descriptor after the tasks files is the launcher's own
	// static binary, with the C tail in it, for the init to hand over to
	// (tail_linux.go).
	Tail bool `json:"tail,omitempty"`
	// Handover: the init has no parent-death signal (WithHandover); the
	// identity switch must not arm one again.
	Handover bool `json:"handover,omitempty"`
	// Sources are the inodes the parent opened for Rootfs, Workdir and each
	// of Mounts (hostpath_linux.go); the child mounts nothing else.
	Sources sourceIDs `json:"sources"`
	// Proc says the descriptor after the tasks files and the tail's binary
	// is a detached procfs of the joined pid namespace, to mount at /proc
	// (WithJoin).
	Proc bool `json:"proc,omitempty"`
	// Check: the deferred child resolves Config.Args[0] in Config.Env's
	// PATH before it says msgReady (WithToolCheck); the request's argv
	// replaces both.
	Check bool `json:"check,omitempty"`
	// KeepHostname: the uts namespace is a joined one, whose hostname is
	// its owner's (Config.Hostname names it for /etc in host mode).
	KeepHostname bool `json:"keepHostname,omitempty"`
	// TmpDir is the run's TMPDIR in mode no-userns (Config.NoUserNS).
	TmpDir string `json:"tmpDir,omitempty"`
	// Reuse: the deferred Go init serves one dispatch after another
	// (WithReuse, reuse_init_linux.go).
	Reuse bool `json:"reuse,omitempty"`
}

// request is the second frame of a deferred child: what the tool of this
// one dispatch is. Its stdio travels beside it as SCM_RIGHTS.
type request struct {
	Args []string `json:"args"`
	Env  []string `json:"env"`
}
