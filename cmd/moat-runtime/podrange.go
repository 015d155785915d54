package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"regexp"
	"strconv"
	"sync"
	"time"

	"github.com/moat-sandbox/moat/nsexec"
	"github.com/moat-sandbox/moat/nsexec/oci"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// A pod is one user namespace with one id range (issue 29, items 2 and
// 3). Its containers join the pause container's ipc, uts, net and pid
// namespaces by path, /proc/<its init>/ns/<type>; with a range of its own
// each, uid 0 of one container would be a stranger to another's shared
// memory and files, and with a user namespace of its own each, a
// container's root would hold no capability over the namespaces it joined
// (the pod's hostname, its SysV objects, its network). So a config that
// joins a namespace of another moat container of the same --root asks
// that container's monitor for a copy of its range's lease (the "lease"
// request, control.go) and is mapped onto the same range
// (nsexec.WithSharedRange), which its own monitor then holds too: the
// range stays the pod's while any of its containers runs, whichever ends
// first. And it joins that container's user namespace,
// /proc/<its init>/ns/user, opened here beside the others
// (nsexec.WithJoin): nsexec's init joins it from C before its Go runtime
// starts, so such a container is started by a re-exec of moat-runtime
// (built with cgo), not by moat-init, which has none. A build without cgo
// cannot join a user namespace at all (nsexec.UserJoinSupported): there a
// pod's container keeps a user namespace of its own on the pod's range,
// as before, and the log says so.
//
// Which container a path names is read from the state root: the
// container whose state's init (Pid, PidStart) is the path's pid, still
// alive, and whose namespace of that type is the very one the runtime
// opened to join (same inode, compared after the liveness check, so a pid
// recycled between the open and the check is not taken for the init). A
// join of any other namespace (CRI's network namespace file, podman's
// netns, a process of no moat container) keeps the container's own range,
// and so does a config with maps of its own (hostUsers: false, --uidmap),
// whose ids the engine chose.

// nsPath is a namespace path of a process: /proc/<pid>/ns/<name>.
var nsPath = regexp.MustCompile(`^/proc/([1-9][0-9]{0,9})/ns/(ipc|uts|net|pid)$`)

// podJoins are the namespace types whose join makes a container its
// owner's pod's.
var podJoins = map[specs.LinuxNamespaceType]string{
	specs.IPCNamespace: "ipc", specs.UTSNamespace: "uts", specs.NetworkNamespace: "net", specs.PIDNamespace: "pid",
}

// podShare is what a container of a pod shares with the pod's container:
// a copy of its range's lease, and its user namespace (nil where it is not
// to be joined). The caller closes both once the sandbox was spawned.
type podShare struct {
	lease *os.File
	user  *os.File
}

func (s *podShare) close() {
	if s == nil {
		return
	}
	for _, f := range []*os.File{s.lease, s.user} {
		if f != nil {
			f.Close()
		}
	}
}

// podLease returns a copy of the lease of the moat container whose
// namespaces the config joins (files are the opened joins, one per
// plan.Joins entry), with its user namespace, or nil when it joins none,
// the config maps its own ids, or the runtime is not host root (it holds
// no ranges then).
func podLease(stateRoot string, plan *oci.Plan, files []*os.File, log *slog.Logger) (*podShare, error) {
	if plan.UIDMap != nil || !nsexec.IsHostRoot() {
		return nil, nil
	}
	type want struct {
		name string
		file *os.File
	}
	byPid := map[int][]want{}
	for i, ns := range plan.Joins {
		name, ok := podJoins[ns.Type]
		m := nsPath.FindStringSubmatch(ns.Path)
		if !ok || m == nil || m[2] != name {
			continue
		}
		pid, _ := strconv.Atoi(m[1])
		byPid[pid] = append(byPid[pid], want{name, files[i]})
	}
	if len(byPid) == 0 {
		return nil, nil
	}
	root, err := oci.OpenRoot(stateRoot)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	ids, err := root.List()
	if err != nil {
		return nil, err
	}
	var owner string
	var user *os.File
	defer func() {
		if user != nil {
			user.Close()
		}
	}()
	for _, id := range ids {
		d, err := root.Open(id)
		if err != nil {
			continue
		}
		st, err := d.ReadState()
		d.Close()
		if err != nil || byPid[st.Pid] == nil || !oci.Alive(st.Pid, st.PidStart) {
			continue
		}
		for _, w := range byPid[st.Pid] {
			if !sameNS(w.file, fmt.Sprintf("/proc/%d/ns/%s", st.Pid, w.name)) {
				return nil, fmt.Errorf("config.json linux.namespaces: the %s namespace of container %s changed while it was joined; retry", w.name, id)
			}
		}
		// Its user namespace, opened before the liveness check below, so
		// that a pid recycled meanwhile is not taken for the init.
		u, err := os.OpenFile(fmt.Sprintf("/proc/%d/ns/user", st.Pid), os.O_RDONLY|unix.O_CLOEXEC, 0)
		if !oci.Alive(st.Pid, st.PidStart) {
			if err == nil {
				u.Close()
			}
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("the user namespace of the pod's container %s: %w", id, err)
		}
		if owner != "" && owner != id {
			u.Close()
			return nil, fmt.Errorf("config.json linux.namespaces: joins namespaces of two moat containers, %s and %s; a pod's containers join one sandbox's", owner, id)
		}
		if user != nil {
			user.Close()
		}
		owner, user = id, u
	}
	if owner == "" {
		return nil, nil
	}
	d, err := root.Open(owner)
	if err != nil {
		return nil, fmt.Errorf("the pod's container %s: %w", owner, err)
	}
	defer d.Close()
	lease, err := askLease(d.At(controlSocket))
	if err != nil {
		return nil, fmt.Errorf("the id range of the pod's container %s, whose namespaces the config joins: %w", owner, err)
	}
	if lease == nil {
		log.Debug("the pod's container holds no id range; this one gets its own", "pod", owner)
		return nil, nil
	}
	share := &podShare{lease: lease}
	if nsexec.UserJoinSupported() {
		share.user, user = user, nil
	} else {
		noUserJoin.Do(func() {
			log.Warn("this moat-runtime was built without cgo, so a pod's containers cannot share its user namespace: each gets one of its own on the pod's id range", "pod", owner)
		})
	}
	return share, nil
}

// podKernFS mounts the sysfs and mqueue the config asks of the network
// and ipc namespaces it joins (Plan.JoinedSysfs, JoinedMqueue) where the
// container joins the pod's user namespace and that one owns them
// (NS_GET_USERNS): its root is then the owner's root, whom the kernel
// lets mount them. Otherwise they stay left out.
func podKernFS(cfg *nsexec.Config, plan *oci.Plan, files []*os.File, pod *podShare) error {
	if pod == nil || pod.user == nil {
		return nil
	}
	for i, ns := range plan.Joins {
		switch {
		case ns.Type == specs.NetworkNamespace && plan.JoinedSysfs && ownedBy(files[i], pod.user):
			// The image's /sys, made where it lacks one, as runc would.
			if err := oci.CreateTargets(plan.Config.Rootfs, []oci.Target{{Path: "/sys", Dir: true}}); err != nil {
				return err
			}
			cfg.Sysfs = true
		case ns.Type == specs.IPCNamespace && plan.JoinedMqueue && ownedBy(files[i], pod.user):
			cfg.Mqueue = true
		}
	}
	return nil
}

// ownedBy says whether the namespace open at ns belongs to the user
// namespace open at user (linux/nsfs.h NS_GET_USERNS).
func ownedBy(ns, user *os.File) bool {
	const nsGetUserNS = 0xb701
	u, err := unix.IoctlRetInt(int(ns.Fd()), nsGetUserNS)
	if err != nil {
		return false
	}
	defer unix.Close(u)
	var a, b unix.Stat_t
	return unix.Fstat(u, &a) == nil && unix.Fstat(int(user.Fd()), &b) == nil && a.Dev == b.Dev && a.Ino == b.Ino
}

// noUserJoin says once that a build without cgo keeps a user namespace
// per container.
var noUserJoin sync.Once

// sameNS says whether f is the namespace at path (same device and inode).
func sameNS(f *os.File, path string) bool {
	var a, b unix.Stat_t
	if unix.Fstat(int(f.Fd()), &a) != nil || unix.Stat(path, &b) != nil {
		return false
	}
	return a.Dev == b.Dev && a.Ino == b.Ino
}

// askLease asks the monitor at the control socket at for a copy of its
// container's lease: nil, with no error, when it holds none.
func askLease(at string) (*os.File, error) {
	conn, err := dialControl(at)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(controlTimeout))
	if err := writeLine(conn, ctlRequest{Op: "lease"}); err != nil {
		return nil, fmt.Errorf("reach the container's monitor: %w", err)
	}
	var rep ctlReply
	lc := &lineConn{c: conn}
	files, err := lc.readLine(&rep)
	if err != nil {
		return nil, fmt.Errorf("the container's monitor did not answer %q: %w", "lease", err)
	}
	switch {
	case !rep.OK && rep.Error == fmt.Sprintf("unknown request %q", "lease"):
		// A monitor of an older moat-runtime, from before a pod shared
		// its range: the container gets its own, as it did then.
		closeAll(files)
		return nil, nil
	case !rep.OK:
		closeAll(files)
		return nil, errors.New(rep.Error)
	case rep.Lease && len(files) == 1:
		return files[0], nil
	case !rep.Lease && len(files) == 0:
		return nil, nil
	}
	closeAll(files)
	return nil, fmt.Errorf("the container's monitor answered %q with %d descriptors", "lease", len(files))
}

// shareLease answers a "lease" request: a copy of the sandbox's lease,
// attached, or none when it holds none.
func (m *monitor) shareLease(c *net.UnixConn) {
	f, err := m.sb.ShareLease()
	switch {
	case errors.Is(err, nsexec.ErrNoLease):
		writeLine(c, ctlReply{OK: true})
	case errors.Is(err, nsexec.ErrSandboxGone):
		reply(c, errNotRunning)
	case err != nil:
		reply(c, err)
	default:
		writeLine(c, ctlReply{OK: true, Lease: true}, f)
		f.Close()
	}
}
