package nsexec

import (
	"io"
	"log/slog"
	"os"
	"time"
)

// DefaultHandshakeTimeout bounds each wait for the child: the hello after
// the spawn, and the exec after the go.
const DefaultHandshakeTimeout = 5 * time.Second

// Option wires Start.
type Option func(*options)

type options struct {
	initPath  string
	timeout   time.Duration
	logger    *slog.Logger
	cgroupFD  int
	placement func(pid int) error
	tasks     []*os.File
	identity  *Identity
	ids       *idRange
	hostRange bool     // WithHostRange
	ranges    *idRange // WithHostRangeSpace
	sharing   bool     // WithSharedRange
	shared    *os.File // its lease
	uids      []IDMap  // WithIDMaps
	gids      []IDMap
	idmapAll  bool // WithIDMappedMounts
	ownerMap  bool // WithOwnerMappedBinds
	trace     func(Trace)
	joins     []nsJoin             // WithJoin, WithNetNS
	noTail    bool                 // WithoutTail
	tmpDir    string               // the run's TMPDIR (nouserns_linux.go)
	after     func()               // runs once the child was reaped, after the host paths were given back
	chosen    func(Identity) error // WithIdentityChosen
	handover  bool                 // WithHandover
	check     *toolCheck           // WithToolCheck
	reuse     bool                 // WithReuse
}

// toolCheck is what WithToolCheck asks the prepared sandbox to resolve.
type toolCheck struct {
	name string
	env  []string
}

func newOptions(opts []Option) options {
	o := options{timeout: DefaultHandshakeTimeout, cgroupFD: -1}
	for _, opt := range opts {
		opt(&o)
	}
	if o.logger == nil {
		o.logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return o
}

// WithInitPath starts the binary at path instead of /proc/self/exe. Its main
// must call Init first.
func WithInitPath(path string) Option { return func(o *options) { o.initPath = path } }

// WithoutTail keeps the Go init as pid 1 to the end instead of handing over
// to the C tail (tail_linux.go), as a build without cgo or a dynamically
// linked launcher does anyway: for comparisons and for debugging.
func WithoutTail() Option { return func(o *options) { o.noTail = true } }

// WithHandover prepares a sandbox that may outlive the process that
// spawned it (Prepare only; Pending.Detach hands it to another process,
// Adopt takes it there). moat-runtime's create needs it: the engine's
// subreaper must become the init's parent, so create, the init's parent,
// exits while the container lives on under a monitor of its own. Such an
// init has no parent-death signal: its life is tied to its sync socket
// alone, which every stage of the init reads, or writes, and ends on at
// its EOF, from its first instruction to its exit (the Go init's
// watchers, the C tail's poll). Every other sandbox keeps its
// parent-death signal.
func WithHandover() Option { return func(o *options) { o.handover = true } }

// WithToolCheck has a prepared sandbox resolve name (a path inside it, or
// a bare name looked up in env's PATH there, as Exec resolves args[0])
// before Prepare returns, and check that what it finds is a file the
// tool's identity may execute: a missing tool then fails Prepare, with a
// SetupError at StepExec whose Path is name and whose Errno is ENOENT,
// EACCES or EISDIR, instead of the later Exec (Prepare only).
// moat-runtime's create needs it: runc fails a missing process.args[0]
// at create, and engines read that failure's words for the status they
// report (127, 126). The file may still go before the Exec, which then
// fails as it would have.
func WithToolCheck(name string, env []string) Option {
	return func(o *options) { o.check = &toolCheck{name: name, env: env} }
}

// WithHandshakeTimeout bounds each wait for the child (default
// DefaultHandshakeTimeout). A child that does not say hello in time is killed
// and Start returns ErrNotWired.
func WithHandshakeTimeout(d time.Duration) Option { return func(o *options) { o.timeout = d } }

// WithLogger sets the logger for the parent side (discarded by default).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// WithCgroupFD clones the child directly into the cgroup v2 directory open at
// fd (clone3 CLONE_INTO_CGROUP), so it never runs outside it.
func WithCgroupFD(fd int) Option { return func(o *options) { o.cgroupFD = fd } }

// WithPlacement calls place with the child's host pid after the child said
// hello and before it is told to go on, for example to write the pid into a
// cgroup v1 leaf. An error kills the child and is returned by Start.
func WithPlacement(place func(pid int) error) Option {
	return func(o *options) { o.placement = place }
}

// WithCgroupTasks makes the child join a cgroup v1 leaf itself: files are
// the leaf's "tasks" files, one per hierarchy, opened for writing by the
// caller (who may close them once Start or Prepare returned). The child
// writes "0" into each before anything else, from the thread that later
// execs the tool, so the tool starts inside the leaf and the cgroup
// namespace unshared after it has the leaf as its root.
//
// Why not the parent writing the child's pid into cgroup.procs
// (WithPlacement): moving a whole thread group write-locks the global
// cgroup_threadgroup_rwsem, whose percpu_down_write waits for an RCU grace
// period, 5 to 15 ms on the reference host in about a third of the starts.
// A thread moving itself through "tasks" skips that lock (kernel v6.0,
// commit 9a3284fad42f "cgroup: Optimize single thread migration"); older
// kernels take it and are no slower than before. The permission check uses
// the opener's credentials (v5.16, commit 1756d7994ad8), the caller's.
func WithCgroupTasks(files ...*os.File) Option { return func(o *options) { o.tasks = files } }

// WithIdentity sets the host uid and gid that the sandbox's single inside id
// maps to, when Start runs as root, instead of one of its own from the
// host id range (WithHostIDRange): every sandbox started with the same
// identity then shares it. It is ignored rootless, where the only id that
// can be mapped is the caller's own.
func WithIdentity(id Identity) Option { return func(o *options) { o.identity = &id } }

// WithIdentityChosen calls chosen with the host uid and gid the sandbox
// will run as, once Start or Prepare picked them and before the init is
// spawned, so nothing of the sandbox runs yet: a caller that must tell the
// sandbox's id apart from every other (the egress proxy admits exactly the
// sandbox's own id to its socket) learns it here, where root's sandboxes
// each get one of their own from the range. An error fails Start or
// Prepare with it, and the id is freed.
func WithIdentityChosen(chosen func(Identity) error) Option {
	return func(o *options) { o.chosen = chosen }
}

// WithHostIDRange makes Start and Prepare, as root without WithIdentity,
// give each sandbox a host uid and gid of its own from first..first+count-1,
// held by a lock file in dir (root's, mode 0700) for the sandbox's life.
// The default is HostIDFirst, HostIDCount and HostIDLockDir; tests and
// hosts that reserve another range use this.
func WithHostIDRange(dir string, first, count uint32) Option {
	return func(o *options) { o.ids = &idRange{dir: dir, first: first, count: count} }
}

// nsJoin is one WithJoin or WithNetNS descriptor (join_linux.go).
type nsJoin struct {
	f    *os.File
	want int // the CLONE_NEW* type it must be, or 0
}

// WithHostRange gives the sandbox a range of ids instead of one:
// HostRangeSize ids, 0 to HostRangeSize-1 inside, so that an image with
// several users, supplementary groups and an entrypoint that drops to
// another uid work (cmd/moat-runtime uses it; moat's own providers and
// moat run keep one id). As root, the range is the sandbox's own, a
// block of moat's range space held by a lock file for the sandbox's life
// (hostid_linux.go; WithHostRangeSpace); in a rootless engine's user
// namespace (its root is not host root) it is every id that namespace
// has, mapped to itself; rootless otherwise, the caller's own id alone,
// as without this option. Config.UID, GID and Groups must lie in it.
func WithHostRange() Option { return func(o *options) { o.hostRange = true } }

// WithHostRangeSpace makes WithHostRange, as root, take its ranges from
// count blocks of HostRangeSize ids from first on, held by lock files in
// dir (root's, mode 0700). The default is HostRangeFirst, HostRangeCount
// and HostRangeLockDir; tests use this.
func WithHostRangeSpace(dir string, first, count uint32) Option {
	return func(o *options) {
		o.hostRange = true
		o.ranges = &idRange{dir: dir, first: first, count: count, size: HostRangeSize}
	}
}

// WithSharedRange maps the sandbox onto exactly the range another
// sandbox holds, instead of a block of its own: lease is a copy of that
// sandbox's lease descriptor (Process.ShareLease, Adopted.ShareLease), as
// for the containers of a pod, which share the pause container's range
// (0 to HostRangeSize-1 inside onto its block, the same maps). The
// descriptor is checked to be a held lock of the range space
// (WithHostRangeSpace, else moat's default; sharedrange_linux.go) and
// anything else fails Start and Prepare with ErrNotRangeLease; the sandbox
// keeps a copy of it until it was reaped, so the range stays held while
// any sandbox that shares it runs, and never frees the block itself. The
// caller may close lease once Start or Prepare returned. As root only
// (rootless, moat holds no ranges); WithIDMaps takes precedence.
func WithSharedRange(lease *os.File) Option {
	return func(o *options) { o.hostRange, o.sharing, o.shared = true, true, lease }
}

// WithIDMaps maps the sandbox's ids by uids and gids (a config's own user
// namespace: podman --userns=auto or --uidmap, a Kubernetes pod with
// hostUsers: false) instead of an id or range moat picks. They are
// honoured if they map no host root and stay within what the caller may
// map (mapping_linux.go): as root any ids but 0 outside moat's own
// reserved ranges; in a rootless engine's user namespace the ids it has;
// rootless otherwise, one line of size 1 onto the caller's own id.
// Config.UID, GID and Groups must be mapped. Overlap with another
// sandbox's maps is the engine's to decide (a pod's containers share
// theirs); moat's own allocations never overlap them, since it refuses
// maps that reach into its reserved ranges.
func WithIDMaps(uids, gids []IDMap) Option {
	return func(o *options) { o.uids, o.gids = uids, gids }
}

// WithIDMappedMounts makes the rootfs and every bind of the Config an
// id-mapped mount with the sandbox's own maps, where the filesystem
// allows it (idmount_linux.go): files the host's ids 0 to N own show as
// owned by ids 0 to N inside, as they would to a process in no user
// namespace, and what the sandbox writes there lands owned by the host
// ids of the same numbers. For a config with no user namespace of its
// own (podman as root without --userns, ctr, a Kubernetes pod without
// hostUsers: false), whose engine expects the container's root to own
// what host root owns. Only as root; a filesystem that cannot be
// id-mapped keeps a plain bind (logged).
func WithIDMappedMounts() Option { return func(o *options) { o.idmapAll = true } }

// WithOwnerMappedBinds makes a read-only bind that the sandbox's own host
// id could not open at all (a directory whose mode gives others no
// search, a file that gives them no read) and that the caller owns an
// id-mapped mount that maps that one owner to the sandbox's uid
// (ownermap_linux.go): the tool reads the caller's files there with the
// owner's permission bits, as a rootless sandbox, which runs as the
// caller, does; no other id is mapped, the bind stays read-only, nosuid
// and nodev, and nothing on the host changes. As root only (rootless the
// sandbox is the caller already). A filesystem that cannot be id-mapped
// makes Start fail with a *SetupError naming the bind, never a bind the
// tool cannot open. It does nothing with WithIDMappedMounts, which maps
// every bind.
func WithOwnerMappedBinds() Option { return func(o *options) { o.ownerMap = true } }

// idRange is where spawn allocates host ids (WithHostIDRange) or ranges
// of them (WithHostRangeSpace): count blocks of size ids from first on.
type idRange struct {
	dir          string
	first, count uint32
	size         uint32 // ids per block; 0 means 1
}

// Identity is a host-side uid and gid.
type Identity struct {
	UID, GID uint32
}
