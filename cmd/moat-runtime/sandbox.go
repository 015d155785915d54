package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"syscall"

	"github.com/moat-sandbox/moat/cgroups"
	"github.com/moat-sandbox/moat/executor/native"
	"github.com/moat-sandbox/moat/nsexec"
	"github.com/moat-sandbox/moat/nsexec/oci"
	"github.com/moat-sandbox/moat/policies"
	"github.com/moat-sandbox/moat/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// filterFor compiles the config's seccomp profile as given, or moat's
// default policy's allowlist when the config has none: a moat sandbox
// never runs unfiltered. The default is the same whatever capabilities
// the config grants: a capability granted inside the user namespace gives
// power over that namespace's objects only, and the calls Docker's
// profile opens for one (mount, unshare, setns for CAP_SYS_ADMIN; ptrace
// and process_vm for CAP_SYS_PTRACE; chroot for CAP_SYS_CHROOT; bpf,
// perf_event_open) are kernel surface moat's default keeps closed (its
// hostile battery, seccomp/attack, expects them refused); an engine that
// wants them passes a profile, as podman does. The default's refusal to
// make a file setuid or setgid stays too: through an id-mapped volume
// such a file would be host root's.
func filterFor(profile *specs.LinuxSeccomp) ([]byte, error) {
	if profile == nil {
		def, err := policies.Builtin("default")
		if err != nil {
			return nil, err
		}
		profile = def.Seccomp
	}
	prog, err := seccomp.Compile(profile)
	if err != nil {
		return nil, fmt.Errorf("config.json linux.seccomp: %w", err)
	}
	return prog.MarshalBinary()
}

// identityOptions are the nsexec options of the plan's identity: the
// config's own maps, or a range of moat's (nsexec.WithHostRange: its own
// block as root, the engine's ids in a rootless engine's namespace, the
// caller's id otherwise; the pod's block, nsexec.WithSharedRange, when
// podLease found one), with id-mapped mounts when moat picked it as root,
// so the image's and volumes' owners are the container's as under runc.
func identityOptions(plan *oci.Plan, pod *podShare) []nsexec.Option {
	if plan.UIDMap != nil {
		return []nsexec.Option{nsexec.WithIDMaps(plan.UIDMap, plan.GIDMap)}
	}
	opts := []nsexec.Option{nsexec.WithHostRange()}
	if pod != nil {
		opts = []nsexec.Option{nsexec.WithSharedRange(pod.lease)}
		if pod.user != nil {
			opts = append(opts, nsexec.WithJoin(pod.user))
		}
	}
	if plan.IDMapMounts {
		opts = append(opts, nsexec.WithIDMappedMounts())
	}
	return opts
}

// leafName is a container ID as a cgroup leaf name (1 to 128 of
// [A-Za-z0-9_.-]); another ID is hashed (leafID).
var leafName = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,128}$`)

// leafID is the cgroup leaf's id for container id, the same in create and
// in the monitor that holds the leaf.
func leafID(id string) string {
	if leafName.MatchString(id) {
		return id
	}
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:16])
}

// cgroupFor creates the container's cgroup with the limits of res
// (memory, pids, cpu) and returns the nsexec options that start the
// sandbox in it. With a cgroupsPath (config.json linux.cgroupsPath) it is
// that group, where the engine reads the container's numbers (pathCgroup);
// otherwise a leaf below moat's own parent group, named for the process
// owner that will hold it (the container's monitor), and only when res
// asks for a limit. A limit this host cannot enforce is refused, as moat
// run refuses a limit typed on its command line: the engine asked for it.
func cgroupFor(id, cgroupsPath string, res *specs.LinuxResources, devices []specs.LinuxDeviceCgroup, log *slog.Logger, owner int) (*cgroups.Leaf, []nsexec.Option, func(), error) {
	noop := func() {}
	var leaf *cgroups.Leaf
	switch {
	case cgroupsPath != "":
		var err error
		if leaf, err = pathCgroup(cgroupsPath, res, devices, log); err != nil || leaf == nil {
			return nil, nil, noop, err
		}
	case res == nil:
		return nil, nil, noop, nil
	default:
		mgr, err := cgroups.New(cgroups.WithLogger(log), cgroups.WithLeafOwner(owner))
		if err != nil {
			return nil, nil, nil, fmt.Errorf("cgroups for linux.resources: %w", err)
		}
		if err := mgr.Posture().Require(wantedLimits(res)...); err != nil {
			return nil, nil, nil, fmt.Errorf("config.json linux.resources: %w (podman: drop --memory, --pids-limit, --cpus, or --pids-limit 0 for its default; rootless podman on cgroup v1: --cgroups=disabled)", err)
		}
		if leaf, err = mgr.Create(leafID(id), res); err != nil {
			return nil, nil, nil, fmt.Errorf("config.json linux.resources: %w", err)
		}
	}
	opts, placed, err := native.LeafOptions(leaf)
	if err != nil {
		leaf.Delete()
		return nil, nil, nil, fmt.Errorf("the container's cgroup: %w", err)
	}
	return leaf, opts, placed, nil
}

func wantedLimits(res *specs.LinuxResources) []cgroups.Limit {
	var want []cgroups.Limit
	if res == nil {
		return nil
	}
	if res.Memory != nil {
		want = append(want, cgroups.Memory)
	}
	if res.Pids != nil {
		want = append(want, cgroups.Pids)
	}
	if res.CPU != nil {
		want = append(want, cgroups.CPU)
	}
	return want
}

// pathCgroup creates the group at linux.cgroupsPath as runc's cgroupfs
// driver places it (cgroups.CreatePath), with the limits of res and the
// config's device rules (v1's files, v2's device program) followed by those of moat's own
// /dev (devDevices), as runc appends its default devices to the config's:
// an engine's deny-all must not take /dev/null from the container. A path
// moat refuses (cgroups.PathError: "..", a symlink or mount on the way, a
// group that is someone else's) fails create whoever asks. Without host
// root, and with no limit asked, a group moat may not create is no error
// (runc's rootless rule): the container runs in create's group, as it
// does without a cgroupsPath.
func pathCgroup(path string, res *specs.LinuxResources, devices []specs.LinuxDeviceCgroup, log *slog.Logger) (*cgroups.Leaf, error) {
	var r specs.LinuxResources
	if res != nil {
		r = *res
	}
	if len(devices) > 0 {
		r.Devices = append(append([]specs.LinuxDeviceCgroup(nil), devices...), devDevices()...)
	}
	leaf, err := cgroups.CreatePath(path, &r, cgroups.WithLogger(log))
	var pe *cgroups.PathError
	switch {
	case err == nil:
		return leaf, nil
	case !errors.As(err, &pe) && !nsexec.IsHostRoot() && len(wantedLimits(res)) == 0 && errors.Is(err, os.ErrPermission):
		log.Debug("linux.cgroupsPath not writable without host root; the container stays in create's cgroup", "path", path, "err", err)
		return nil, nil
	case errors.As(err, &pe):
		return nil, fmt.Errorf("config.json linux.cgroupsPath: %w", err)
	default:
		return nil, fmt.Errorf("config.json linux.cgroupsPath %q: %w", path, err)
	}
}

// scopeCgroup is the systemd driver (--systemd-cgroup): the container's
// group is the transient scope a "slice:prefix:name" cgroupsPath names,
// which the system manager creates holding the init, with Delegate=yes
// (cgroups.StartScope). It needs systemd as this host's init and host
// root (the user's manager, rootless, is not asked: features.go says
// so); otherwise create fails saying which. The leaf goes to sb once the
// scope is there.
func scopeCgroup(path string, res *specs.LinuxResources, log *slog.Logger, sb *prepared) ([]nsexec.Option, error) {
	switch {
	case !cgroups.SystemdBooted():
		return nil, errors.New("--systemd-cgroup: this host's init is not systemd (no /run/systemd/system, sd_booted(3)), so no systemd manager can make the container's scope; use the cgroupfs driver (podman --cgroup-manager cgroupfs, containerd SystemdCgroup = false)")
	case !nsexec.IsHostRoot():
		return nil, errors.New("--systemd-cgroup without host root (the user's systemd manager) is not supported; use the cgroupfs driver, or podman --cgroups=disabled")
	}
	if _, _, err := cgroups.ScopeOf(path); err != nil {
		return nil, fmt.Errorf("config.json linux.cgroupsPath: %w", err)
	}
	place := func(pid int) error {
		leaf, err := cgroups.StartScope(cgroups.SystemBus, path, pid, res, cgroups.WithLogger(log))
		if err != nil {
			return fmt.Errorf("config.json linux.cgroupsPath (--systemd-cgroup): %w", err)
		}
		sb.leaf = leaf
		return nil
	}
	return []nsexec.Option{nsexec.WithPlacement(place)}, nil
}

// devDevices are the device rules moat's fixed /dev needs (its null, zero,
// full, random, urandom, tty, and the private devpts's ptmx and
// terminals: Linux's devices.txt numbers).
func devDevices() []specs.LinuxDeviceCgroup {
	rule := func(major, minor int64) specs.LinuxDeviceCgroup {
		r := specs.LinuxDeviceCgroup{Allow: true, Type: "c", Major: &major, Access: "rwm"}
		if minor >= 0 {
			r.Minor = &minor
		}
		return r
	}
	return []specs.LinuxDeviceCgroup{rule(1, 3), rule(1, 5), rule(1, 7), rule(1, 8), rule(1, 9), rule(5, 0), rule(5, 2), rule(136, -1)}
}

// openLeaf finds the cgroup create made for this process (the monitor):
// the one at the config's cgroupsPath (with the levels create made, which
// go with it), or else the leaf named for the monitor.
func openLeaf(id string, h *handoff, log *slog.Logger) (*cgroups.Leaf, error) {
	if h != nil && h.CgroupsPath != "" {
		return cgroups.OpenPath(h.CgroupsPath, h.CgroupMade, cgroups.WithLogger(log))
	}
	mgr, err := cgroups.New(cgroups.WithLogger(log))
	if err != nil {
		return nil, err
	}
	return mgr.Open(leafID(id))
}

// deleteOrphanCgroup removes the group at cgroupsPath and the levels
// create made for it (cgroup.json), killing what is left in it, as the
// monitor does when the container ends. A group already gone is done;
// one that cannot be removed fails the delete, which keeps the record for
// another try.
func deleteOrphanCgroup(d *oci.Dir, log *slog.Logger) error {
	rec, err := d.ReadCgroup()
	if err != nil || rec == nil {
		return err
	}
	leaf, err := cgroups.OpenPath(rec.Path, rec.Made, cgroups.WithLogger(log))
	if err != nil {
		// Gone already, or no longer the group create made (a level
		// replaced by a symlink or mount): nothing of it is removed, and
		// the state still goes.
		if !errors.Is(err, fs.ErrNotExist) {
			log.Warn("the killed monitor's cgroup is left", "path", rec.Path, "err", err)
		}
		return nil
	}
	return leaf.Delete()
}

// raiseRlimits sets the config's rlimits on create itself before the
// sandbox is spawned, so that a hard limit above the current one (podman
// asks RLIMIT_NOFILE 1048576) is raised here, where host root may, and the
// init only sets what it inherited. Rootless this fails for such a limit,
// and the init's own setrlimit then reports it with the rlimit's name.
func raiseRlimits(rl []specs.POSIXRlimit) {
	for _, r := range rl {
		res, ok := nsexec.RlimitResource(r.Type)
		if !ok {
			continue
		}
		// Only raised, never lowered: the monitor, started before, keeps
		// serving start, kill and exec (a NOFILE of 4 would end its
		// accepts, a small CPU limit would kill it with SIGXCPU); the init
		// sets the exact values.
		var cur syscall.Rlimit
		if syscall.Getrlimit(res, &cur) != nil || (cur.Max >= r.Hard && cur.Cur >= r.Soft) {
			continue
		}
		cur.Max, cur.Cur = max(cur.Max, r.Hard), max(cur.Cur, r.Soft)
		// syscall's, not x/sys's: it keeps the Go runtime's saved
		// RLIMIT_NOFILE in step, so children get the new value.
		_ = syscall.Setrlimit(res, &cur)
	}
}

// initBinary is moat's small static sandbox init (cmd/moat-init), started
// instead of a re-exec of moat-runtime when it is installed next to it.
// Besides starting faster, it has no cgo: the init runs under the
// container's own filter, and glibc's pthread_create (in a cgo binary)
// tries clone3 and gives up on the EPERM that profiles written for runc
// answer to it (runc's init never runs under the filter), where the Go
// runtime's own thread creation uses clone.
const initBinary = "moat-init"

func initOption() []nsexec.Option {
	self, err := os.Executable()
	if err != nil {
		return nil
	}
	p := filepath.Join(filepath.Dir(self), initBinary)
	if unix.Access(p, unix.X_OK) != nil {
		return nil
	}
	return []nsexec.Option{nsexec.WithInitPath(p)}
}

// cleanStale removes the cgroup leaves of moat processes that are gone
// (cgroups.Manager.CleanStale), here those of a monitor that was killed.
func cleanStale() {
	mgr, err := cgroups.New()
	if err != nil {
		return
	}
	mgr.CleanStale()
	mgr.Close()
}

// prepared is the container's sandbox as create spawned it, before the
// handoff: what close undoes if the handoff does not happen.
type prepared struct {
	pending *nsexec.Pending
	leaf    *cgroups.Leaf
	pty     *os.File // the terminal's slave, when process.terminal
}

// prepareSandbox spawns the container's sandbox (nsexec.Prepare
// WithHandover: namespaces, mounts, identity, cgroup leaf, all done; the
// init waits for its process), its cgroup leaf named for the monitor
// (monitor, a pid), and its pty when the process has a terminal, whose
// master goes to the engine's console socket.
func prepareSandbox(o createOpts, stateRoot string, spec *specs.Spec, plan *oci.Plan, log *slog.Logger, monitor int) (*prepared, error) {
	for _, n := range plan.Notes {
		log.Debug("config", "note", n)
	}
	sb := &prepared{}
	ok := false
	defer func() {
		if !ok {
			sb.close()
		}
	}()
	if plan.Terminal {
		if o.consoleSocket == "" {
			return nil, errors.New("process.terminal is set but no --console-socket was given")
		}
		var err error
		if sb.pty, err = sendConsole(o.consoleSocket, plan.ConsoleSize); err != nil {
			return nil, err
		}
	}
	if err := oci.CreateTargets(plan.Config.Rootfs, plan.Targets); err != nil {
		return nil, err
	}
	prog, err := filterFor(plan.Seccomp)
	if err != nil {
		return nil, err
	}
	cfg := plan.Config
	cfg.Seccomp = prog
	// The pty is the process's controlling terminal, as under runc.
	cfg.Terminal = plan.Terminal
	raiseRlimits(cfg.Rlimits)
	// A process.args[0] that is not there fails create, as under runc
	// (execFailure has its words).
	opts := []nsexec.Option{nsexec.WithLogger(log), nsexec.WithHandover(), nsexec.WithToolCheck(plan.Args[0], plan.Env)}
	jopts, joined, closeJoins, err := joinOptions(plan)
	if err != nil {
		return nil, err
	}
	defer closeJoins()
	opts = append(opts, jopts...)
	pod, err := podLease(stateRoot, plan, joined, log)
	if err != nil {
		return nil, err
	}
	defer pod.close()
	if pod == nil || pod.user == nil {
		opts = append(opts, initOption()...)
	} else {
		// moat-init has no cgo, and the join of the pod's user namespace
		// is C (podrange.go): this binary's re-exec is the init.
		log.Debug("the init joins the pod's user namespace: a re-exec of moat-runtime, not " + initBinary)
	}
	opts = append(opts, identityOptions(plan, pod)...)
	if err := podKernFS(&cfg, plan, joined, pod); err != nil {
		return nil, err
	}
	var cgroupsPath string
	var devices []specs.LinuxDeviceCgroup
	if spec.Linux != nil {
		cgroupsPath = spec.Linux.CgroupsPath
		if spec.Linux.Resources != nil {
			devices = spec.Linux.Resources.Devices
		}
	}
	if o.systemdCgroup && cgroupsPath != "" {
		// The system manager makes the scope holding the init, once it is
		// there (nsexec.WithPlacement: before the init goes on).
		copts, err := scopeCgroup(cgroupsPath, plan.Resources, log, sb)
		if err != nil {
			return nil, err
		}
		opts = append(opts, copts...)
		cfg.CgroupNS = plan.CgroupNS
		if sb.pending, err = nsexec.Prepare(context.Background(), &cfg, opts...); err != nil {
			if x := execFailure(err); x != nil {
				return nil, x
			}
			return nil, fmt.Errorf("create the sandbox: %w", err)
		}
		if err := oci.SetOOMScoreAdj(sb.pending.Pid(), plan.OOMScoreAdj); err != nil {
			return nil, err
		}
		ok = true
		return sb, nil
	}
	leaf, copts, placed, err := cgroupFor(o.id, cgroupsPath, plan.Resources, devices, log, monitor)
	if err != nil {
		return nil, err
	}
	sb.leaf = leaf
	opts = append(opts, copts...)
	cfg.CgroupNS = plan.CgroupNS && leaf != nil
	sb.pending, err = nsexec.Prepare(context.Background(), &cfg, opts...)
	placed()
	if err != nil {
		if x := execFailure(err); x != nil {
			return nil, x
		}
		return nil, fmt.Errorf("create the sandbox: %w", err)
	}
	if err := oci.SetOOMScoreAdj(sb.pending.Pid(), plan.OOMScoreAdj); err != nil {
		return nil, err
	}
	ok = true
	return sb, nil
}

// close undoes what the handoff did not take: the sandbox, if not handed
// over, and the leaf; this process's copy of the pty always.
func (sb *prepared) close() {
	if sb.pending != nil {
		sb.pending.Close()
	}
	if sb.leaf != nil {
		sb.leaf.Delete()
	}
	if sb.pty != nil {
		sb.pty.Close()
	}
}
