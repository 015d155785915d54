package nsexec

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"
)

// A pod's containers share namespaces (DESIGN.md, D3): a sandbox may be
// born in the network, IPC, UTS, pid or cgroup namespace of another
// instead of a new one, and in its user namespace (userjoin_linux.go: the
// init joins that one itself, from C). Its mount namespace is always its
// own, which moat builds itself.
//
// Why from the spawning thread: setns(2) moves only the calling thread,
// and clone(2) gives the child the calling thread's namespaces (for a pid
// namespace, the thread's pid_ns_for_children). own() spawns from a thread
// it locked and never gives back to the Go runtime, so no other goroutine
// ever runs in a joined namespace (runc does the same joins in its C
// pre-runtime, nsexec.c, before its clone).

// WithJoin starts the sandbox in the namespace open at f (an nsfs
// descriptor: /proc/PID/ns/TYPE, or a bind of one such as an `ip netns`
// file) instead of a new one of that type, which must be net, ipc, uts,
// pid, cgroup or user. Every other namespace is still new; without a
// joined user namespace the sandbox's is its own, so it holds no
// capability over what it joined. Refused with a *SetupError of step
// join, before anything is started: a mount namespace, two of one type,
// and a namespace of the host's (the caller's own or pid 1's); an ipc,
// uts, pid or cgroup namespace must moreover belong to a user namespace
// below the caller's, as a sandbox's does (a network namespace is an
// engine's, owned by the engine's own).
//
// A user namespace (a pod sandbox's, so that the pod is one user
// namespace) must be strictly below the caller's, the build must have
// cgo (UserJoinSupported; EOPNOTSUPP otherwise) and the caller be root;
// the sandbox's new namespaces then belong to it, and once the init is
// in it its uid_map and gid_map must map no host root and be exactly the
// sandbox's planned maps (WithSharedRange of the pod's lease), or the
// start fails with a *SetupError of step join (userjoin_linux.go).
//
// What the kernel then leaves to the sandbox:
//   - a joined network namespace: Config.Network must stay NetworkNone
//     (lo is the namespace owner's), and no sysfs can be mounted for it
//     unless it belongs to the joined user namespace; likewise an mqueue
//     for a joined ipc namespace;
//   - a joined uts namespace: the hostname is its owner's; Config.Hostname
//     must be empty or the same;
//   - a joined pid namespace: the init is not pid 1 there, its /proc is a
//     procfs of that namespace made here (procfs pidns=, Linux 6.18), and
//     it ends every process it leaves behind itself (pid1_linux.go);
//   - a joined cgroup namespace replaces Config.CgroupNS.
//
// The caller keeps f open until Start or Prepare returned.
func WithJoin(f *os.File) Option { return func(o *options) { o.joins = append(o.joins, nsJoin{f: f}) } }

// WithNetNS is WithJoin for a network namespace (an OCI engine's, which it
// configured before the container starts): a descriptor of another type
// is refused.
func WithNetNS(f *os.File) Option {
	return func(o *options) { o.joins = append(o.joins, nsJoin{f: f, want: unix.CLONE_NEWNET}) }
}

// nsNames are the joinable namespace types and their /proc/PID/ns names.
var nsNames = map[int]string{
	unix.CLONE_NEWNET:    "net",
	unix.CLONE_NEWIPC:    "ipc",
	unix.CLONE_NEWUTS:    "uts",
	unix.CLONE_NEWPID:    "pid",
	unix.CLONE_NEWCGROUP: "cgroup",
	unix.CLONE_NEWUSER:   "user",
}

// nsfs ioctls (linux/nsfs.h).
const (
	nsGetUserNS = 0xb701 // the owning user namespace, as a new descriptor
	nsGetParent = 0xb702 // a user (or pid) namespace's parent
	nsGetNSType = 0xb703 // the CLONE_NEW* type
)

// joins is what spawn checked about a sandbox's joined namespaces.
type joins struct {
	ns    []nsJoin // each with want set to its type
	flags int      // the CLONE_NEW* flags of all of them
	// proc is a detached procfs of the joined pid namespace, for the
	// child's /proc; nil without one.
	proc *os.File
	// hostname is the joined uts namespace's.
	hostname string
	// user is the joined user namespace, or nil: not in ns, since the
	// init joins it itself (userjoin_linux.go).
	user *os.File
}

func (j *joins) has(flag int) bool { return j != nil && j.flags&flag != 0 }

func (j *joins) close() {
	if j != nil && j.proc != nil {
		j.proc.Close()
	}
}

// planJoins checks o's descriptors and adjusts c for them: the hostname
// of a joined uts namespace (c.Hostname, if set, must be the same), no
// cgroup namespace of its own when one is joined. Nothing is joined yet.
func planJoins(o *options, c *Config) (*joins, error) {
	if len(o.joins) == 0 {
		return nil, nil
	}
	hostnameSet := c.Hostname != ""
	j := &joins{}
	for _, in := range o.joins {
		typ, err := checkJoin(in)
		if err != nil {
			j.close()
			return nil, err
		}
		if j.flags&typ != 0 {
			j.close()
			return nil, joinErr(in.f, "names a second "+nsNames[typ]+" namespace; join one of each type", unix.EINVAL)
		}
		j.flags |= typ
		if typ == unix.CLONE_NEWUSER {
			j.user = in.f
			continue
		}
		j.ns = append(j.ns, nsJoin{f: in.f, want: typ})
		switch typ {
		case unix.CLONE_NEWNET:
			if c.Network != NetworkNone || c.Egress != nil {
				j.close()
				return nil, &ConfigError{Field: "network", Value: c.Network, Reason: "a joined network namespace is its owner's: lo is not the sandbox's to bring up; use " + NetworkNone}
			}
		case unix.CLONE_NEWUTS:
			name, err := utsName(in.f)
			if err != nil {
				j.close()
				return nil, joinErr(in.f, "read the joined uts namespace's hostname", err)
			}
			if hostnameSet && c.Hostname != name {
				j.close()
				return nil, &ConfigError{Field: "hostname", Value: c.Hostname, Reason: fmt.Sprintf("the joined uts namespace's hostname is %q, which only its owner may change; leave it unset or the same", name)}
			}
			c.Hostname, j.hostname = name, name
		case unix.CLONE_NEWPID:
			if j.proc, err = procOf(in.f); err != nil {
				j.close()
				return nil, err
			}
		case unix.CLONE_NEWCGROUP:
			c.CgroupNS = false
		}
	}
	if err := j.conflicts(c); err != nil {
		j.close()
		return nil, err
	}
	return j, nil
}

// conflicts refuses what a sandbox cannot do in a namespace it joined,
// which belongs to another user namespace: mount a sysfs of its network
// namespace or the message queues of its ipc namespace, or write their
// sysctls (WriteNetSysctls does a network namespace's from the caller).
//
// A namespace that belongs to the joined user namespace (a pod's, whose
// root the sandbox's init is) is the sandbox's to mount a sysfs or an
// mqueue of (fs/sysfs/mount.c and ipc/mqueue.c check CAP_SYS_ADMIN over
// the owner).
func (j *joins) conflicts(c *Config) error {
	if c.Sysfs && j.has(unix.CLONE_NEWNET) && !j.ownedByUser(unix.CLONE_NEWNET) {
		return &ConfigError{Field: "sysfs", Value: "true", Reason: "a sysfs belongs to the user namespace that owns its network namespace, and the joined one is another's: the kernel refuses the sandbox one"}
	}
	if c.Mqueue && j.has(unix.CLONE_NEWIPC) && !j.ownedByUser(unix.CLONE_NEWIPC) {
		return &ConfigError{Field: "mqueue", Value: "true", Reason: "an mqueue filesystem belongs to the user namespace that owns its ipc namespace, and the joined one is another's: the kernel refuses the sandbox one"}
	}
	for _, k := range sortedKeys(c.Sysctl) {
		kind, _ := SysctlKind(k)
		if kind == SysctlIPC && j.has(unix.CLONE_NEWIPC) || kind == SysctlNet && j.has(unix.CLONE_NEWNET) {
			return &ConfigError{Field: "sysctl." + k, Value: c.Sysctl[k], Reason: "belongs to the joined " + kind + " namespace, whose owner sets it (a pod's sandbox; WriteNetSysctls for an engine's network namespace)"}
		}
	}
	return nil
}

// ownedByUser says whether the joined namespace of type flag belongs to
// the joined user namespace (NS_GET_USERNS).
func (j *joins) ownedByUser(flag int) bool {
	if j == nil || j.user == nil {
		return false
	}
	for _, n := range j.ns {
		if n.want != flag {
			continue
		}
		u, err := unix.IoctlRetInt(int(n.f.Fd()), nsGetUserNS)
		if err != nil {
			return false
		}
		defer unix.Close(u)
		var a, b unix.Stat_t
		return unix.Fstat(u, &a) == nil && unix.Fstat(int(j.user.Fd()), &b) == nil && idOf(&a) == idOf(&b)
	}
	return false
}

// checkJoin returns the namespace type of a descriptor to join, or why it
// is refused (WithJoin).
func checkJoin(in nsJoin) (int, error) {
	fd := int(in.f.Fd())
	typ, err := unix.IoctlRetInt(fd, nsGetNSType)
	if err != nil {
		return 0, joinErr(in.f, "not a namespace (an nsfs descriptor: /proc/PID/ns/TYPE)", err)
	}
	name, ok := nsNames[typ]
	switch {
	case in.want != 0 && typ != in.want:
		return 0, joinErr(in.f, "not a "+nsNames[in.want]+" namespace", unix.EINVAL)
	case typ == unix.CLONE_NEWUSER:
		if err := checkUserJoin(in.f); err != nil {
			return 0, err
		}
		return typ, nil
	case typ == unix.CLONE_NEWNS:
		return 0, joinErr(in.f, "a mount namespace is never joined: moat builds each sandbox's own", unix.EINVAL)
	case !ok:
		return 0, joinErr(in.f, "a namespace of a type moat does not join (net, ipc, uts, pid, cgroup and user are)", unix.EINVAL)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return 0, joinErr(in.f, "stat the namespace", err)
	}
	for _, h := range hostNamespaces()[name] {
		if h == idOf(&st) {
			return 0, joinErr(in.f, "is the host's "+name+" namespace (the caller's own or pid 1's); moat never shares it with a sandbox", unix.EPERM)
		}
	}
	if typ != unix.CLONE_NEWNET {
		// An engine's network namespace belongs to the engine's user
		// namespace; the others a pod shares are a sandbox's, made in a
		// user namespace of its own: a host daemon's private namespace
		// (systemd PrivateIPC=, a rootless engine's own) is not.
		if err := ownedBelowUs(fd); err != nil {
			return 0, joinErr(in.f, err.Error(), unix.EPERM)
		}
	}
	return typ, nil
}

// ownedBelowUs says why the namespace at fd is not owned by a user
// namespace strictly below the caller's, or nil if it is: its owner's
// chain of parents (NS_GET_PARENT, which fails with EPERM above the
// caller's own) must reach the caller's user namespace.
func ownedBelowUs(fd int) error {
	hostNamespaces()
	self := selfUserNS
	if self == (fileID{}) {
		return fmt.Errorf("the caller's user namespace is unknown (no /proc/self/ns/user)")
	}
	u, err := unix.IoctlRetInt(fd, nsGetUserNS)
	if err != nil {
		return fmt.Errorf("its owning user namespace cannot be read (NS_GET_USERNS: %v)", err)
	}
	// Nesting stops at 32 user namespaces (user_namespaces(7)).
	for range 33 {
		var st unix.Stat_t
		err := unix.Fstat(u, &st)
		if err == nil && idOf(&st) == self {
			unix.Close(u)
			return fmt.Errorf("it belongs to the caller's own user namespace, not a sandbox's (a host daemon's, or the engine's own)")
		}
		p, perr := unix.IoctlRetInt(u, nsGetParent)
		unix.Close(u)
		if err != nil || perr != nil {
			return fmt.Errorf("it belongs to a user namespace that is not below the caller's (the host's, or another outside its reach)")
		}
		if unix.Fstat(p, &st) == nil && idOf(&st) == self {
			unix.Close(p)
			return nil
		}
		u = p
	}
	unix.Close(u)
	return fmt.Errorf("its user namespace is nested deeper than the kernel allows")
}

var (
	hostNSOnce sync.Once
	hostNS     map[string][]fileID
	selfUserNS fileID
)

// hostNamespaces are the caller's own namespaces and pid 1's (where
// ptrace's rules let the caller read them), by /proc/PID/ns name, read
// once. The caller's are its calling thread's (/proc/thread-self): a thread
// that joined another namespace is locked to the goroutine that joined it
// (own, InNamespace) and runs nothing else, while /proc/self is the main
// thread's, which such a goroutine may have locked and moved.
func hostNamespaces() map[string][]fileID {
	hostNSOnce.Do(func() {
		hostNS = map[string][]fileID{}
		var st unix.Stat_t
		if unix.Stat("/proc/thread-self/ns/user", &st) == nil {
			selfUserNS = idOf(&st)
		}
		for _, name := range []string{"net", "ipc", "uts", "pid", "cgroup"} {
			for _, pid := range []string{"thread-self", "1"} {
				var st unix.Stat_t
				if unix.Stat("/proc/"+pid+"/ns/"+name, &st) == nil {
					hostNS[name] = append(hostNS[name], idOf(&st))
				}
			}
		}
	})
	return hostNS
}

func joinErr(f *os.File, detail string, err error) *SetupError {
	return &SetupError{Step: StepJoin, Path: f.Name(), Detail: detail, Errno: errnoOf(err)}
}

// enter moves the calling (locked) thread into every joined namespace.
func (j *joins) enter() error {
	if j == nil {
		return nil
	}
	for _, n := range j.ns {
		if err := unix.Setns(int(n.f.Fd()), n.want); err != nil {
			return joinErr(n.f, "join the "+nsNames[n.want]+" namespace (setns needs CAP_SYS_ADMIN over it and in the caller's own user namespace)", err)
		}
	}
	return nil
}

// InNamespace runs fn on a thread of its own that joined the namespace
// open at f (setns(2), any type a thread may join: net, ipc, uts, pid,
// cgroup), and discards the thread afterwards: it is never given back to
// the Go runtime, so nothing else ever runs in that namespace. fn must not
// start goroutines that expect to run there.
func InNamespace(f *os.File, fn func() error) error {
	done := make(chan error, 1)
	go func() {
		// Never unlocked: the thread ends with this goroutine.
		runtime.LockOSThread()
		if err := unix.Setns(int(f.Fd()), 0); err != nil {
			done <- fmt.Errorf("join the namespace %s: %w", f.Name(), err)
			return
		}
		done <- fn()
	}()
	return <-done
}

// utsName reads the hostname of the uts namespace open at f.
func utsName(f *os.File) (string, error) {
	var name string
	err := InNamespace(f, func() error {
		var u unix.Utsname
		if err := unix.Uname(&u); err != nil {
			return err
		}
		name = unix.ByteSliceToString(u.Nodename[:])
		return nil
	})
	return name, err
}

// procOf makes a detached procfs of the pid namespace open at pidns, for a
// sandbox born in that namespace: the sandbox cannot mount one itself,
// since a procfs belongs to the user namespace that owns its pid namespace
// (fs/proc/root.c proc_init_fs_context), another sandbox's, where it holds
// no capability. The caller may (it has them in an ancestor, or owns it),
// and procfs's pidns= option (Linux 6.18, proc_parse_pidns_param) names
// the namespace without this process having to be in it.
func procOf(pidns *os.File) (*os.File, error) {
	fsfd, err := unix.Fsopen("proc", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return nil, joinErr(pidns, "create a procfs for the joined pid namespace", err)
	}
	defer unix.Close(fsfd)
	if err := unix.FsconfigSetString(fsfd, "source", "proc"); err != nil {
		return nil, joinErr(pidns, "create a procfs for the joined pid namespace", err)
	}
	if err := unix.FsconfigSetFd(fsfd, "pidns", int(pidns.Fd())); err != nil {
		return nil, &SetupError{Step: StepJoin, Path: pidns.Name(), Errno: errnoOf(err),
			Detail: "the sandbox's /proc in a joined pid namespace needs a procfs of that namespace, which this kernel cannot make (procfs pidns=, Linux 6.18)",
			Hint:   "join the pid namespace on Linux 6.18 or later, or give the container a pid namespace of its own"}
	}
	if err := unix.FsconfigCreate(fsfd); err != nil {
		return nil, joinErr(pidns, "create a procfs for the joined pid namespace", err)
	}
	mfd, err := unix.Fsmount(fsfd, unix.FSMOUNT_CLOEXEC, attrProc)
	if err != nil {
		return nil, joinErr(pidns, "mount a procfs for the joined pid namespace", err)
	}
	return os.NewFile(uintptr(mfd), "proc:"+strconv.Itoa(mfd)), nil
}
