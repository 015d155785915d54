package nsexec

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Start spawns a sandbox for cfg and returns once the tool was exec'd in it
// (or with the *SetupError the child reported). The tool gets stdio as
// descriptors 0, 1 and 2. cfg is not modified; zero fields get the defaults.
func Start(ctx context.Context, cfg *Config, stdio Stdio, opts ...Option) (*Process, error) {
	if _, marked := os.LookupEnv(initFDEnv); marked && !initCalled.Load() {
		return nil, ErrNested
	}
	// Refused before anything touches the host (spawn checks again where
	// the descriptors are handed over).
	if err := CheckStdio(stdio); err != nil {
		return nil, err
	}
	o := newOptions(opts)
	if o.handover {
		return nil, errors.New("nsexec: WithHandover is for Prepare: a started sandbox stays its launcher's")
	}
	if o.check != nil {
		return nil, errors.New("nsexec: WithToolCheck is for Prepare: Start resolves its tool anyway")
	}
	c, err := normalize(cfg, false)
	if err != nil {
		return nil, err
	}
	p, sync, err := spawn(ctx, c, stdio, &o, false)
	if err != nil {
		return nil, err
	}
	p.attach(sync)
	o.logger.Debug("sandbox started", "pid", p.Pid(), "args", c.Args)
	return p, nil
}

// spawn starts the init for c and runs the handshake up to the exec of the
// tool, or, deferred, up to the child's ready; the returned sync socket is
// then still open and the child waits on it for its request.
func spawn(ctx context.Context, c *Config, stdio Stdio, o *options, deferred bool) (*Process, *os.File, error) {
	if c.NoUserNS {
		return spawnNoUserNS(ctx, c, stdio, o, deferred)
	}
	j, err := planJoins(o, c)
	if err != nil {
		return nil, nil, err
	}
	defer j.close() // the child has its own copy of the procfs once started
	if c.Hostname == "" {
		c.Hostname = DefaultHostname // not in a joined uts namespace: planJoins named its own
	}
	m, err := hostMapping(o, c)
	if err != nil {
		return nil, nil, err
	}
	if o.chosen != nil {
		if err := o.chosen(m.id); err != nil {
			m.lease.release()
			return nil, nil, err
		}
	}
	p, sync, err := spawnAs(ctx, c, stdio, o, deferred, m, j)
	if err != nil {
		m.lease.release()
	}
	return p, sync, err
}

// spawnAs is spawn with the maps chosen; the Process owns their lease
// once its init was started (released when it was reaped).
func spawnAs(ctx context.Context, c *Config, stdio Stdio, o *options, deferred bool, m *mapping, j *joins) (*Process, *os.File, error) {
	id, root := m.id, m.root
	paths, err := openHostPaths(c, id, root, o)
	if err != nil {
		return nil, nil, err
	}
	idm, err := prepareIDMounts(c, paths, m, o)
	if err != nil {
		paths.giveBack(o.logger)
		return nil, nil, err
	}
	defer idm.close() // own attached them, or they are not needed
	trace := o.trace != nil && !deferred
	var tail *os.File
	if !o.noTail {
		tail = tailBinary(c, deferred, id)
	}
	if tail != nil {
		defer tail.Close()
	}
	// The init of a joined user namespace makes its own procfs before the
	// join, unless it joins a pid namespace (then the procfs is ours,
	// j.proc) or has none (NoProc): userns.c.
	userProc := j.has(unix.CLONE_NEWUSER) && !j.has(unix.CLONE_NEWPID) && !c.NoProc
	frame, err := encodeFrame(&wire{Config: c, SetGroups: m.setgroups, Trace: trace, Deferred: deferred, Tasks: len(o.tasks), Tail: tail != nil, Sources: paths.ids,
		Proc: j.has(unix.CLONE_NEWPID) || userProc, KeepHostname: j.has(unix.CLONE_NEWUTS) || c.InheritHostname, Handover: o.handover, Check: deferred && o.check != nil, TmpDir: o.tmpDir, Reuse: o.reuse})
	if err != nil {
		paths.giveBack(o.logger)
		return nil, nil, err
	}
	owned := false // o.after is the Process's to run once it exists
	defer func() {
		if !owned && o.after != nil {
			o.after()
		}
	}()
	sync, childEnd, err := syncPair()
	if err != nil {
		paths.giveBack(o.logger)
		return nil, nil, err
	}
	files, closeStdio, err := stdioFiles(stdio)
	if err != nil {
		childEnd.Close()
		sync.Close()
		paths.giveBack(o.logger)
		return nil, nil, err
	}
	initPath := o.initPath
	if initPath == "" {
		initPath = "/proc/self/exe"
	}
	attr := &os.ProcAttr{
		Env:   []string{initFDEnv + "=3", initGodebug},
		Files: append(append(files, childEnd), o.tasks...), // sync at 3, tasks from 4, then the tail's binary
		Sys:   sysProcAttr(c, m, o, j),
	}
	if tail != nil {
		attr.Files = append(attr.Files, tail)
	}
	if j.has(unix.CLONE_NEWPID) {
		attr.Files = append(attr.Files, j.proc) // after the tail's binary (init_linux.go)
	}
	if j.has(unix.CLONE_NEWUSER) {
		// Last: the init's constructor leaves its procfs in its place,
		// where the init takes the procfs (userns.c), or closes it.
		attr.Env = append(attr.Env, userJoinEnv(j, len(attr.Files), userProc, initCapsFor(c.Caps)))
		attr.Files = append(attr.Files, j.user)
	}
	// A lent workdir is given back once the child is reaped, whichever way it
	// ends (Process.own), before Wait returns.
	p := &Process{done: make(chan struct{}), lease: m.lease, hostID: id, uids: m.uids, gids: m.gids, after: func() {
		paths.giveBack(o.logger)
		if o.after != nil {
			o.after()
		}
	}, pidfd: -1}
	owned = true
	p.groupKill = c.NoUserNS
	p.joins, p.idMounts = j, idm
	if o.handover {
		attr.Sys.PidFD = &p.pidfd // CLONE_PIDFD: a handle on this very child (Handover.PidFD)
	}
	started := make(chan error, 1)
	t0 := monotonic()
	go p.own(initPath, attr, started)
	err = <-started
	t1 := monotonic()
	childEnd.Close()
	closeStdio()
	if err != nil {
		sync.Close()
		return nil, nil, cloneError(initPath, err)
	}
	h := handshake{sync: sync, o: o, deferred: deferred, trace: trace}
	if err := p.handshake(ctx, &h, frame); err != nil {
		p.abort()
		sync.Close()
		return nil, nil, err
	}
	if trace {
		o.trace(traceOf(t0, t1, h.execAt, &h.marks))
	}
	return p, sync, nil
}

// normalize validates cfg and returns a copy with defaults and absolute
// host paths.
// A deferred config (Prepare) carries no Args: they come with the request.
func normalize(cfg *Config, deferred bool) (*Config, error) {
	if cfg == nil {
		return nil, errors.New("nsexec config: nil")
	}
	if !deferred && (len(cfg.Args) == 0 || cfg.Args[0] == "") {
		return nil, errors.New("nsexec config: Args must name the tool")
	}
	c := *cfg
	if c.Version == 0 {
		c.Version = ConfigVersion
	}
	if c.Version != ConfigVersion {
		return nil, fmt.Errorf("nsexec config: version %d, want %d", c.Version, ConfigVersion)
	}
	switch c.Network {
	case "":
		c.Network = NetworkNone
	case NetworkNone, NetworkLoopback:
	default:
		return nil, fmt.Errorf("nsexec config: network %q is neither %q nor %q", c.Network, NetworkNone, NetworkLoopback)
	}
	if e := c.Egress; e != nil {
		switch {
		case c.Network != NetworkLoopback:
			return nil, &ConfigError{Field: "network", Value: c.Network, Reason: "egress needs lo up; use " + NetworkLoopback}
		case e.Port == 0:
			return nil, &ConfigError{Field: "egress.port", Value: "0", Reason: "name the loopback port the forwarder listens on"}
		case !filepath.IsAbs(e.Socket):
			return nil, &ConfigError{Field: "egress.socket", Value: e.Socket, Reason: "use the absolute path inside the sandbox where the proxy's socket is bound"}
		}
		egress := *e
		c.Egress = &egress
	}
	if c.UID == 0 && c.GID == 0 && !c.ExactIDs {
		c.UID, c.GID = DefaultUID, DefaultGID
	}
	if c.Cwd != "" && (!filepath.IsAbs(c.Cwd) || filepath.Clean(c.Cwd) != c.Cwd) {
		return nil, &ConfigError{Field: "cwd", Value: c.Cwd, Reason: "use an absolute, clean path"}
	}
	if c.UID == math.MaxUint32 || c.GID == math.MaxUint32 {
		return nil, &ConfigError{Field: "uid", Value: fmt.Sprint(c.UID, ":", c.GID), Reason: "4294967295 is the invalid id (-1); use 0 to 4294967294"}
	}
	if c.Caps != nil {
		last, err := lastCap()
		if err != nil {
			return nil, err
		}
		if extra := c.Caps.all() &^ (1<<(last+1) - 1); extra != 0 {
			return nil, &ConfigError{Field: "caps", Value: fmt.Sprint(CapabilityNames(extra)), Reason: fmt.Sprintf("this kernel's last capability is %d; drop them", last)}
		}
		caps := *c.Caps
		c.Caps = &caps
	}
	if len(c.Groups) > maxGroups {
		return nil, &ConfigError{Field: "groups", Value: fmt.Sprint(len(c.Groups)), Reason: fmt.Sprintf("the kernel takes at most %d supplementary groups", maxGroups)}
	}
	c.Groups = slices.Clone(c.Groups)
	// An empty hostname becomes DefaultHostname in spawn, unless the
	// sandbox joins a uts namespace (planJoins).
	if reason := HostnameProblem(c.Hostname); reason != "" {
		return nil, &ConfigError{Field: "hostname", Value: c.Hostname, Reason: reason}
	}
	if c.TmpSize <= 0 {
		c.TmpSize = DefaultTmpSize
	}
	if c.Umask != nil {
		if *c.Umask > 0o777 {
			return nil, &ConfigError{Field: "umask", Value: fmt.Sprintf("%#o", *c.Umask), Reason: "is not a mode mask; use 0 to 0777"}
		}
		umask := *c.Umask
		c.Umask = &umask
	}
	var err error
	for _, p := range []*string{&c.Rootfs, &c.Workdir} {
		if *p != "" {
			if *p, err = filepath.Abs(*p); err != nil {
				return nil, fmt.Errorf("nsexec config: %w", err)
			}
		}
	}
	if c.RootfsWritable && c.Rootfs == "" {
		return nil, &ConfigError{Field: "rootfsWritable", Value: "true", Reason: "needs a rootfs: host mode's root is moat's own tmpfs"}
	}
	if err := checkSysctls(c.Sysctl); err != nil {
		return nil, err
	}
	if c.NoProc && len(c.Sysctl) > 0 {
		return nil, &ConfigError{Field: "sysctl", Value: sortedKeys(c.Sysctl)[0], Reason: "is written through a procfs, which a NoProc sandbox (mode " + string(ModeNoProc) + ") has none of"}
	}
	c.Sysctl = maps.Clone(c.Sysctl)
	if c.NoUserNS {
		if err := checkNoUserNS(&c); err != nil {
			return nil, err
		}
	} else if c.EgressTCP != 0 {
		return nil, &ConfigError{Field: "egressTCP", Value: fmt.Sprint(c.EgressTCP), Reason: "is the no-userns rung's egress (NoUserNS); a sandbox with namespaces uses Egress"}
	}
	if err := checkPaths(&c); err != nil {
		return nil, err
	}
	c.MaskedPaths, c.ReadonlyPaths = slices.Clone(c.MaskedPaths), slices.Clone(c.ReadonlyPaths)
	if err := checkRootfsPropagation(c.RootfsPropagation); err != nil {
		return nil, err
	}
	if err := CheckDevices(c.Devices); err != nil {
		return nil, err
	}
	c.Devices = slices.Clone(c.Devices)
	c.Mounts = slices.Clone(c.Mounts)
	for i := range c.Mounts {
		m := &c.Mounts[i]
		// Only a bind has a host source, and an empty one is refused, never
		// made absolute: filepath.Abs("") is the current directory, which is
		// how a tmpfs once became a read-write bind of it.
		if m.Type != MountTmpfs && m.Source != "" {
			if m.Source, err = filepath.Abs(m.Source); err != nil {
				return nil, fmt.Errorf("nsexec config: %w", err)
			}
		}
		if _, err := parseMount(fmt.Sprintf("mounts[%d]", i), m, c.TmpSize); err != nil {
			return nil, err
		}
	}
	return &c, nil
}

// sysProcAttr creates every namespace at clone time (peers.md 2b): joining
// them later is not possible from a multi-threaded Go process.
func sysProcAttr(c *Config, m *mapping, o *options, j *joins) *syscall.SysProcAttr {
	if c.NoUserNS {
		// No namespace (nouserns_linux.go): the init's own session, and
		// so its own process group, which the tool and its descendants
		// stay in; the parent-death signal as in every rung.
		return &syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGKILL, UseCgroupFD: o.cgroupFD >= 0, CgroupFD: max(o.cgroupFD, 0)}
	}
	attr := &syscall.SysProcAttr{
		Cloneflags: unix.CLONE_NEWUSER | unix.CLONE_NEWNS | unix.CLONE_NEWPID |
			unix.CLONE_NEWNET | unix.CLONE_NEWIPC | unix.CLONE_NEWUTS,
		UidMappings: procIDMaps(m.uids),
		GidMappings: procIDMaps(m.gids),
		// Rootless, setgroups must be denied before gid_map can be written
		// (user_namespaces(7)); as root it stays allowed so the child can
		// set the sandbox's groups, clearing those it inherits from root.
		GidMappingsEnableSetgroups: m.setgroups,
		AmbientCaps:                initCapsFor(c.Caps),
		Setsid:                     true,
		// Fires when the spawning thread exits (golang/go#27505), so own()
		// keeps that thread locked for the child's whole life. A sandbox
		// to hand over has none (WithHandover).
		Pdeathsig: syscall.SIGKILL,
	}
	if o.handover {
		attr.Pdeathsig = 0
	}
	if o.cgroupFD >= 0 {
		attr.UseCgroupFD, attr.CgroupFD = true, o.cgroupFD
	}
	if j != nil {
		attr.Cloneflags &^= uintptr(j.flags) // joined by own() instead (WithJoin)
	}
	if j.has(unix.CLONE_NEWUSER) {
		// The init joins the user namespace and then makes the others
		// itself, so that they belong to it (userns.c); its maps are the
		// pod's, written when the pod's sandbox was made.
		attr.Cloneflags &^= unix.CLONE_NEWNS | unix.CLONE_NEWNET | unix.CLONE_NEWIPC | unix.CLONE_NEWUTS
		attr.UidMappings, attr.GidMappings, attr.GidMappingsEnableSetgroups = nil, nil, false
		attr.AmbientCaps = nil // raised by the init after the join (userns.c)
	}
	if j.has(unix.CLONE_NEWPID) {
		// Go's child checks getppid() against the parent's pid after the
		// prctl and kills itself if they differ (syscall/exec_linux.go);
		// born in a joined pid namespace, where its parent has no pid,
		// getppid() is 0. (A namespace's own init survives that kill:
		// the kernel drops a SIGKILL it sends itself.) The init arms the
		// signal itself (init_linux.go), its sync socket's EOF covering
		// the window, as it does for a lost signal.
		attr.Pdeathsig = 0
	}
	return attr
}

// procIDMaps is ms as syscall writes them.
func procIDMaps(ms []IDMap) []syscall.SysProcIDMap {
	out := make([]syscall.SysProcIDMap, len(ms))
	for i, m := range ms {
		out[i] = syscall.SysProcIDMap{ContainerID: int(m.Inside), HostID: int(m.Host), Size: int(m.Size)}
	}
	return out
}

func syncPair() (parent, child *os.File, err error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("create sandbox sync socket: %w", err)
	}
	// Non-blocking, so os.File registers it with the poller and read
	// deadlines work for the handshake timeout.
	if err := unix.SetNonblock(fds[0], true); err != nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
		return nil, nil, fmt.Errorf("create sandbox sync socket: %w", err)
	}
	return os.NewFile(uintptr(fds[0]), "sandbox-sync"), os.NewFile(uintptr(fds[1]), "sandbox-sync-child"), nil
}

// stdioFiles checks the given descriptors (CheckStdio: this is where every
// descriptor handed to a tool passes) and fills nil members with
// /dev/null; the returned func closes what it opened.
func stdioFiles(s Stdio) ([]*os.File, func(), error) {
	if err := CheckStdio(s); err != nil {
		return nil, nil, err
	}
	files := []*os.File{s.Stdin, s.Stdout, s.Stderr}
	var opened []*os.File
	closeAll := func() {
		for _, f := range opened {
			f.Close()
		}
	}
	for i, f := range files {
		if f != nil {
			continue
		}
		flag := os.O_WRONLY
		if i == 0 {
			flag = os.O_RDONLY
		}
		null, err := os.OpenFile(os.DevNull, flag, 0)
		if err != nil {
			closeAll()
			return nil, nil, fmt.Errorf("open sandbox stdio: %w", err)
		}
		opened = append(opened, null)
		files[i] = null
	}
	return files, closeAll, nil
}

// cloneError turns a failed spawn into a SetupError of step clone.
func cloneError(initPath string, err error) error {
	if se, ok := err.(*SetupError); ok {
		return se // joins.enter's, already typed
	}
	errno := errnoOf(err)
	return &SetupError{Step: StepClone, Path: initPath, Errno: errno, Detail: "spawn the sandbox init", Hint: hintFor(StepClone, errno)}
}

// handshake is the parent's side of one handshake.
type handshake struct {
	sync     *os.File
	o        *options
	deferred bool // wait for the child's ready instead of its exec
	trace    bool
	marks    [numMarks]int64 // the child's, when tracing
	execAt   int64           // when the parent saw the exec, when tracing
}

// handshake sends the config, waits for hello, runs the placement hook,
// says go and waits for the tool's start, the ready of a deferred child, or a
// report.
func (p *Process) handshake(ctx context.Context, h *handshake, frame []byte) error {
	sync, o := h.sync, h.o
	stop := context.AfterFunc(ctx, func() { sync.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	sync.SetDeadline(time.Now().Add(o.timeout))
	if _, err := sync.Write(frame); err != nil {
		return p.wireErr(ctx, err, ErrNotWired)
	}
	var b [1]byte
	if _, err := io.ReadFull(sync, b[:]); err != nil {
		return p.wireErr(ctx, err, ErrNotWired)
	}
	switch b[0] {
	case msgHello:
	case msgError:
		return readReport(sync)
	default:
		return ErrNotWired
	}
	if p.joins.has(unix.CLONE_NEWUSER) {
		if err := checkJoinedUser(p.Pid(), p.joins, p.uids, p.gids); err != nil {
			return err
		}
	}
	p.holdNamespaces()
	if o.placement != nil {
		if err := o.placement(p.Pid()); err != nil {
			return fmt.Errorf("place sandbox pid %d: %w", p.Pid(), err)
		}
	}
	sync.SetDeadline(time.Now().Add(o.timeout))
	if _, err := sync.Write([]byte{msgGo}); err != nil {
		return p.wireErr(ctx, err, errors.New("nsexec: the sandbox child went away before the go"))
	}
	defer sync.SetDeadline(time.Time{})
	return p.awaitExec(ctx, h)
}

// awaitExec reads what the child says after the go (or after a deferred
// child's request): its stage marks, its ready, a report, or that the tool
// was started; an EOF before that is an init that died.
func (p *Process) awaitExec(ctx context.Context, h *handshake) error {
	var b [1]byte
	for {
		n, err := h.sync.Read(b[:])
		if err != nil {
			return p.wireErr(ctx, err, fmt.Errorf("nsexec: sandbox setup did not finish within %v", h.o.timeout))
		}
		if n != 1 {
			continue
		}
		switch {
		case b[0] == msgStarted && !h.deferred:
			if h.trace {
				h.execAt = monotonic()
			}
			return nil
		case b[0] == msgError:
			return readReport(h.sync)
		case b[0] == msgReady && h.deferred:
			return nil
		case b[0] == msgTrace && h.trace:
			if err := readMarks(h.sync, &h.marks); err != nil {
				return p.wireErr(ctx, err, errors.New("nsexec: the sandbox child went away in its trace"))
			}
		default:
			return fmt.Errorf("nsexec: unexpected message %q from the sandbox child", b[0])
		}
	}
}

// wireErr prefers the context's error, then the meaning of a timeout or an
// early EOF (a child that exits with our frame unread resets the
// connection: ECONNRESET, or EPIPE on our write).
func (p *Process) wireErr(ctx context.Context, err, timeout error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, io.EOF) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, syscall.ECONNRESET) {
		return timeout
	}
	return fmt.Errorf("nsexec: sandbox sync socket: %w", err)
}

func readReport(sync *os.File) error {
	b, err := io.ReadAll(io.LimitReader(sync, 64<<10))
	// A child that fails before it read all we sent (a filter that refuses
	// the tail its recvmsg) closes with data unread: the kernel then ends
	// our read of what it wrote with ECONNRESET instead of EOF
	// (net/unix/af_unix.c unix_release_sock). The report is whole.
	if err != nil && !(errors.Is(err, syscall.ECONNRESET) && len(b) > 0) {
		return fmt.Errorf("nsexec: read the sandbox child's report: %w", err)
	}
	return decodeReport(b)
}
