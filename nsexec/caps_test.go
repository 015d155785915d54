//go:build linux

package nsexec

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

func init() {
	probes["capsets"] = probeCapsets
	probes["caps-hostile"] = probeCapsHostile
}

// dockerCaps is Docker's default capability set, what engines ask.
var dockerCaps = mustCaps("CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD", "CAP_NET_RAW",
	"CAP_SETGID", "CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE")

func mustCaps(names ...string) uint64 {
	b, err := CapabilityBits(names)
	if err != nil {
		panic(err)
	}
	return b
}

// capHex is a set as /proc/PID/status shows it.
func capHex(set uint64) string { return fmt.Sprintf("%016x", set) }

// probeCapsets prints the tool's sets, securebits and no_new_privs, then
// what chown to another id and binding port 80 give, then its effective
// set after a setresuid to 1000 (the fixup of an entrypoint that drops to
// a service user), one line each.
func probeCapsets() error {
	st := map[string]string{}
	b, _ := os.ReadFile("/proc/self/status")
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			st[k] = strings.TrimSpace(v)
		}
	}
	bits, _ := unix.PrctlRetInt(unix.PR_GET_SECUREBITS, 0, 0, 0, 0)
	fmt.Printf("eff=%s prm=%s inh=%s bnd=%s amb=%s nnp=%s secbits=%d\n", st["CapEff"], st["CapPrm"], st["CapInh"], st["CapBnd"], st["CapAmb"], st["NoNewPrivs"], bits)
	f := "/tmp/chown-me"
	os.WriteFile(f, nil, 0o644)
	fmt.Printf("chown=%v\n", errnoName(unix.Chown(f, 1, 1)))
	s, _ := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	fmt.Printf("bind80=%v\n", errnoName(unix.Bind(s, &unix.SockaddrInet4{Port: 80})))
	runtime.LockOSThread()
	_, _, e := unix.RawSyscall(unix.SYS_SETRESUID, 1000, 1000, 1000)
	b, _ = os.ReadFile("/proc/thread-self/status")
	eff := ""
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			eff = strings.TrimSpace(v)
		}
	}
	fmt.Printf("setuid1000=%v eff=%s\n", errnoName(e), eff)
	// Held until stdin closes, so the test can read the init's threads.
	io.Copy(io.Discard, os.Stdin)
	return nil
}

func errnoName(err error) string {
	if err == nil {
		return "ok"
	}
	var e unix.Errno
	if errors.As(err, &e) {
		if e == 0 {
			return "ok"
		}
		return unix.ErrnoName(e)
	}
	return err.Error()
}

// TestCapsGranted: a sandbox granted capabilities (an OCI config's, here
// Docker's default set) has them inside its user namespace: uid 0 gets
// them in its effective, permitted and bounding sets, with no_new_privs
// and no securebits (runc's semantics), can chown a file to another id
// and bind a low port, and loses them when it drops to uid 1000. A uid
// other than 0 gets its ambient set alone, and nothing without one (as
// under runc). Every thread of its init holds the permitted set and no
// effective capability, whichever init it has. Rootless the same holds,
// with the one id mapped.
func TestCapsGranted(t *testing.T) {
	bothInits(t, func(t *testing.T, prepared bool) {
		var opts []Option
		root := IsHostRoot()
		if root {
			opts = append(opts, rangeSpace(t, 1))
		}
		tail := prepared && tailExpected()
		// Rootless one id is mapped: uid 1 and 1000 are not, for uid 0.
		chown, setuid := "ok", "ok"
		if !root {
			chown, setuid = "EINVAL", "EINVAL"
		}
		d, none := capHex(dockerCaps), capHex(0)
		cfg := probeConfig(t, "capsets")
		cfg.UID, cfg.GID, cfg.ExactIDs = 0, 0, true
		cfg.Caps = &Capabilities{Bounding: dockerCaps, Permitted: dockerCaps, Effective: dockerCaps}
		afterDrop := none
		if !root {
			afterDrop = d // the setresuid failed
		}
		want := fmt.Sprintf("eff=%s prm=%s inh=%s bnd=%s amb=%s nnp=1 secbits=0\nchown=%s\nbind80=ok\nsetuid1000=%s eff=%s\n",
			d, d, none, d, none, chown, setuid, afterDrop)
		if got := runCapsProbe(t, cfg, prepared, dockerCaps, opts...); got != want {
			t.Errorf("uid 0 with Docker's set:\n got %q\nwant %q", got, want)
		}

		bind := mustCaps("CAP_NET_BIND_SERVICE")
		cfg.UID, cfg.GID = 1000, 1000
		cfg.Caps = &Capabilities{Bounding: dockerCaps, Permitted: bind | mustCaps("CAP_CHOWN"), Inheritable: bind, Ambient: bind}
		initPrm := cfg.Caps.Permitted
		if tail {
			initPrm = bind // the tail's own exec, by uid 1000, kept the ambient set alone
		}
		chown = "EPERM"
		if !root {
			chown = "EINVAL"
		}
		b := capHex(bind)
		want = fmt.Sprintf("eff=%s prm=%s inh=%s bnd=%s amb=%s nnp=1 secbits=0\nchown=%s\nbind80=ok\nsetuid1000=ok eff=%s\n", b, b, b, d, b, chown, b)
		if got := runCapsProbe(t, cfg, prepared, initPrm, opts...); got != want {
			t.Errorf("uid 1000 with an ambient set:\n got %q\nwant %q", got, want)
		}

		cfg.Caps = &Capabilities{Bounding: dockerCaps, Permitted: dockerCaps, Effective: dockerCaps}
		initPrm = dockerCaps
		if tail {
			initPrm = 0
		}
		want = fmt.Sprintf("eff=%s prm=%s inh=%s bnd=%s amb=%s nnp=1 secbits=0\nchown=%s\nbind80=EACCES\nsetuid1000=ok eff=%s\n", none, none, none, d, none, chown, none)
		if got := runCapsProbe(t, cfg, prepared, initPrm, opts...); got != want {
			t.Errorf("uid 1000 with Docker's set and no ambient (runc's: nothing):\n got %q\nwant %q", got, want)
		}
	})
}

// startWith is start (pid1_test.go) with options.
func startWith(t *testing.T, cfg *Config, stdio Stdio, prepared bool, opts ...Option) (*Process, error) {
	t.Helper()
	if !prepared {
		return Start(context.Background(), cfg, stdio, opts...)
	}
	tmpl := *cfg
	tmpl.Args, tmpl.Env = nil, nil
	s, err := Prepare(context.Background(), &tmpl, opts...)
	if err != nil {
		return nil, err
	}
	return s.Exec(context.Background(), cfg.Args, cfg.Env, stdio)
}

// runCapsProbe runs cfg (the capsets probe), checks every thread of its
// init once the probe has said its four lines (no effective capability,
// initPrm permitted, the config's bounding set where every thread drops
// it), and returns what the probe said.
func runCapsProbe(t *testing.T, cfg *Config, prepared bool, initPrm uint64, opts ...Option) string {
	t.Helper()
	outR, outW, _ := os.Pipe()
	inR, inW, _ := os.Pipe()
	p, err := startWith(t, cfg, Stdio{Stdin: inR, Stdout: outW, Stderr: outW}, prepared, opts...)
	outW.Close()
	inR.Close()
	if err != nil {
		outR.Close()
		inW.Close()
		t.Fatal(err)
	}
	defer func() { inW.Close(); p.Wait(); outR.Close() }()
	br := bufio.NewReader(outR)
	var out strings.Builder
	for range 4 {
		line, err := br.ReadString('\n')
		out.WriteString(line)
		if err != nil {
			return out.String()
		}
	}
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", p.Pid()))
	for _, task := range tasks {
		st := statusFields(t, fmt.Sprintf("/proc/%d/task/%s/status", p.Pid(), task.Name()))
		if st["CapEff"] != capHex(0) || st["CapPrm"] != capHex(initPrm) || st["CapAmb"] != capHex(0) && st["CapAmb"] != capHex(cfg.Caps.Ambient) {
			t.Errorf("init thread %s: CapEff %s CapPrm %s CapAmb %s, want no effective capability and permitted %s", task.Name(), st["CapEff"], st["CapPrm"], st["CapAmb"], capHex(initPrm))
		}
		if broadcastBounding && st["CapBnd"] != capHex(cfg.Caps.Bounding) {
			t.Errorf("init thread %s: CapBnd %s, want %s", task.Name(), st["CapBnd"], capHex(cfg.Caps.Bounding))
		}
		if st["NoNewPrivs"] != "1" {
			t.Errorf("init thread %s: no_new_privs %s", task.Name(), st["NoNewPrivs"])
		}
	}
	return out.String()
}

// probeCapsHostile tries, with every capability of its user namespace
// and no filter, what each would do on the host, and prints what each
// attempt returned as JSON: name to errno name ("ok" when it worked).
func probeCapsHostile() error {
	res := map[string]string{}
	try := func(name string, err error) { res[name] = errnoName(err) }
	raw := func(nr uintptr, a ...uintptr) error {
		var v [6]uintptr
		copy(v[:], a)
		_, _, e := unix.Syscall6(nr, v[0], v[1], v[2], v[3], v[4], v[5])
		if e != 0 {
			return e
		}
		return nil
	}
	// CAP_SYS_ADMIN: a mount over the host directory bound rw at /w lands
	// in the sandbox's own mount namespace; the read-only bind at /ro
	// stays read-only (its flags are locked) and a file cannot be written
	// there.
	try("mount-over-bind", unix.Mount("tmpfs", "/w", "tmpfs", 0, "size=64k"))
	os.WriteFile("/w/planted", []byte("x"), 0o644)
	unix.Unmount("/w", unix.MNT_DETACH)
	try("remount-ro-bind-rw", unix.Mount("", "/ro", "", unix.MS_REMOUNT|unix.MS_BIND, ""))
	if fd, err := unix.OpenTree(unix.AT_FDCWD, "/ro", unix.OPEN_TREE_CLOEXEC); err == nil {
		try("setattr-clear-rdonly", unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, &unix.MountAttr{Attr_clr: unix.MOUNT_ATTR_RDONLY}))
		try("setattr-clear-nodev", unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, &unix.MountAttr{Attr_clr: unix.MOUNT_ATTR_NODEV}))
		unix.Close(fd)
	} else {
		try("setattr-clear-rdonly", err)
	}
	try("write-ro-bind", os.WriteFile("/ro/planted", []byte("x"), 0o644))
	// CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH: a root-only host file through
	// the bind, by path and by handle.
	_, err := os.ReadFile("/ro/secret")
	try("read-root-only-file", err)
	try("write-root-owned-dir", os.WriteFile("/w/by-root", []byte("x"), 0o644))
	var h unix.FileHandle
	var mnt int
	h, mnt, err = unix.NameToHandleAt(unix.AT_FDCWD, "/ro/secret", 0)
	if err == nil {
		mfd, _ := unix.Open("/ro", unix.O_RDONLY|unix.O_DIRECTORY, 0)
		_, err = unix.OpenByHandleAt(mfd, h, unix.O_RDONLY)
		_ = mnt
	}
	try("open-by-handle", err)
	// CAP_NET_ADMIN over a network namespace of the host's user namespace
	// (an engine's, as podman's or a CNI pod's), which this sandbox
	// joined: setting lo's flags to what they are changes nothing if it
	// is let through, and is refused as the namespace is not ours.
	s, _ := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	ifr, _ := unix.NewIfreq("lo")
	if err := unix.IoctlIfreq(s, unix.SIOCGIFFLAGS, ifr); err != nil {
		try("net-admin-host", err)
	} else {
		try("net-admin-host", unix.IoctlIfreq(s, unix.SIOCSIFFLAGS, ifr))
	}
	// CAP_SYS_PTRACE on a host process: its pid names nothing here.
	host, _ := strconv.Atoi(os.Getenv("MOAT_HOST_PID"))
	try("ptrace-host", raw(unix.SYS_PTRACE, unix.PTRACE_ATTACH, uintptr(host)))
	try("kill-host", unix.Kill(host, 0))
	var buf [8]byte
	local := []unix.Iovec{{Base: &buf[0], Len: 8}}
	remote := []unix.RemoteIovec{{Base: 0x400000, Len: 8}}
	_, err = unix.ProcessVMReadv(host, local, remote, 0)
	try("process-vm-host", err)
	// CAP_SETUID: an id outside the sandbox's range is not mapped.
	runtime.LockOSThread()
	try("setuid-outside-range", raw(unix.SYS_SETRESUID, 65536, 65536, 65536))
	try("setgid-outside-range", raw(unix.SYS_SETRESGID, 70000, 70000, 70000))
	// CAP_SYS_MODULE, CAP_SYS_TIME, CAP_MKNOD, CAP_SYS_RAWIO.
	fd, _ := unix.Open("/probe", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	try("finit-module", raw(unix.SYS_FINIT_MODULE, uintptr(fd), uintptr(unsafe.Pointer(&[]byte{0}[0])), 0))
	try("init-module", raw(unix.SYS_INIT_MODULE, uintptr(unsafe.Pointer(&buf[0])), 8, uintptr(unsafe.Pointer(&[]byte{0}[0]))))
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_REALTIME, &ts)
	try("clock-settime", unix.ClockSettime(unix.CLOCK_REALTIME, &ts))
	tv := unix.NsecToTimeval(time.Now().UnixNano())
	try("settimeofday", unix.Settimeofday(&tv))
	try("mknod-block", unix.Mknod("/tmp/sda", unix.S_IFBLK|0o600, int(unix.Mkdev(8, 0))))
	try("iopl", raw(unix.SYS_IOPL, 3))
	b, _ := json.Marshal(res)
	fmt.Println(string(b))
	return nil
}

// TestCapsStayInsideTheUserNamespace: a sandbox granted every capability
// and no filter, uid 0 inside, cannot use them on the host: a mount over
// a bound host directory stays in its own mount namespace, a read-only
// bind stays read-only, a root-only host file stays unreadable and a
// root-owned host directory unwritable, an engine's network namespace
// (joined) refuses it, a host process cannot be reached, an id outside
// its range cannot be taken, and loading a module, setting the clock, a
// block device node and port I/O are all refused. Each is tried, each
// fails closed; and the host directory, the host file and the host's
// mount table are as they were.
func TestCapsStayInsideTheUserNamespace(t *testing.T) {
	rootOnly(t)
	bothInitsRoot(t, func(t *testing.T, prepared bool) {
		base := t.TempDir()
		os.Chmod(base, 0o755)
		w, ro := filepath.Join(base, "w"), filepath.Join(base, "ro")
		os.Mkdir(w, 0o755)
		os.Mkdir(ro, 0o755)
		os.WriteFile(filepath.Join(ro, "secret"), []byte("host secret"), 0o600)
		netns := engineNetNS(t)
		last, err := lastCap()
		if err != nil {
			t.Fatal(err)
		}
		all := uint64(1)<<(last+1) - 1
		cfg := probeConfig(t, "caps-hostile")
		cfg.UID, cfg.GID, cfg.ExactIDs = 0, 0, true
		cfg.Env = append(cfg.Env, "MOAT_HOST_PID="+strconv.Itoa(os.Getpid()))
		cfg.Caps = &Capabilities{Bounding: all, Permitted: all, Effective: all, Inheritable: all, Ambient: all}
		cfg.Mounts = append(cfg.Mounts,
			specs.Mount{Source: w, Destination: "/w", Options: []string{"rw"}},
			specs.Mount{Source: ro, Destination: "/ro", Options: []string{"ro"}})
		mountsBefore := hostMounts(t, base)
		outR, outW, _ := os.Pipe()
		p, err := startWith(t, cfg, Stdio{Stdout: outW, Stderr: outW}, prepared, rangeSpace(t, 1), WithNetNS(netns))
		outW.Close()
		if err != nil {
			outR.Close()
			t.Fatal(err)
		}
		line, _ := bufio.NewReader(outR).ReadString('\n')
		outR.Close()
		p.Wait()
		var got map[string]string
		if err := json.Unmarshal([]byte(line), &got); err != nil {
			t.Fatalf("probe said %q: %v", line, err)
		}
		want := map[string]string{
			"mount-over-bind":      "ok", // in its own mount namespace
			"remount-ro-bind-rw":   "EPERM",
			"setattr-clear-rdonly": "EPERM",
			"setattr-clear-nodev":  "EPERM",
			"write-ro-bind":        "EROFS",
			"read-root-only-file":  "EACCES",
			"write-root-owned-dir": "EACCES",
			"open-by-handle":       "EPERM",
			"net-admin-host":       "EPERM",
			"ptrace-host":          "ESRCH",
			"kill-host":            "ESRCH",
			"process-vm-host":      "ESRCH",
			"setuid-outside-range": "EINVAL",
			"setgid-outside-range": "EINVAL",
			"finit-module":         "EPERM",
			"init-module":          "EPERM",
			"iopl":                 "EPERM",
			"clock-settime":        "EPERM",
			"settimeofday":         "EPERM",
			"mknod-block":          "EPERM",
		}
		for k, v := range want {
			// A kernel built without modules or port I/O (this host's)
			// has no such call at all: refused too.
			if nosys := k == "finit-module" || k == "init-module" || k == "iopl"; nosys && got[k] == "ENOSYS" {
				continue
			}
			if got[k] != v {
				t.Errorf("%s: %q, want %s", k, got[k], v)
			}
		}
		if entries, _ := os.ReadDir(w); len(entries) != 0 {
			t.Errorf("the host directory bound at /w now holds %v", entries)
		}
		if entries, _ := os.ReadDir(ro); len(entries) != 1 {
			t.Errorf("the host directory bound at /ro now holds %v", entries)
		}
		if after := hostMounts(t, base); after != mountsBefore {
			t.Errorf("the host's mount table changed:\nbefore %s\nafter  %s", mountsBefore, after)
		}
	})
}

// engineNetNS is a new network namespace of the host's user namespace,
// as an engine makes for its containers (podman's, a CNI pod's): made on
// a thread of its own, which the runtime discards with its namespace.
func engineNetNS(t *testing.T) *os.File {
	t.Helper()
	type res struct {
		f   *os.File
		err error
	}
	ch := make(chan res)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			ch <- res{nil, err}
			return
		}
		f, err := os.Open("/proc/thread-self/ns/net")
		ch <- res{f, err}
	}()
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Cleanup(func() { r.f.Close() })
	return r.f
}

// bothInitsRoot is bothInits as root alone.
func bothInitsRoot(t *testing.T, body func(t *testing.T, prepared bool)) {
	for _, prepared := range []bool{false, true} {
		name := "cold"
		if prepared {
			name = "prepared"
		}
		t.Run(name, func(t *testing.T) { body(t, prepared) })
	}
}

// hostMounts is the host's mount table below dir (the mount points of
// this process's namespace there), as one string: other work on the host
// mounts and unmounts elsewhere meanwhile.
func hostMounts(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var points []string
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], dir) {
			points = append(points, f[4])
		}
	}
	return strings.Join(points, " ")
}
