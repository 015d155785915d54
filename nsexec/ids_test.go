//go:build linux

package nsexec

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/conformance/testenv"
	"golang.org/x/sys/unix"
)

// testRangeFirst is the first block of the range spaces the tests lock
// in directories of their own: a block of moat's range space far above
// what running sandboxes take from the bottom of it, aligned on its size.
const testRangeFirst = HostRangeFirst + 1900*HostRangeSize

// rangeSpace is a lock directory of the test's own for count blocks.
func rangeSpace(t *testing.T, count uint32) Option {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "ranges")
	return WithHostRangeSpace(dir, testRangeFirst, count)
}

// rootOnly runs body as root only: what it checks is what root may map.
func rootOnly(t *testing.T) {
	t.Helper()
	testenv.RequireRoot(t)
	if !IsHostRoot() {
		testenv.Skipf(t, "needs root of the initial user namespace")
	}
}

// As root, WithHostRange maps ids 0 to 65535 inside onto a block of the
// range space of the sandbox's own, held while it runs: two sandboxes at
// once get two blocks, a third finds the space (two blocks) exhausted
// with a typed error naming the directory, and a block is free again once
// its sandbox was reaped.
func TestHostRangePerSandbox(t *testing.T) {
	rootOnly(t)
	space := rangeSpace(t, 2)
	var ps [2]*Process
	for i := range ps {
		var err error
		ps[i], err = Start(context.Background(), &Config{Args: []string{"/bin/sleep", "60"}, UID: 0, GID: 0, ExactIDs: true}, Stdio{}, space)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { ps[i].Signal(syscall.SIGKILL); ps[i].Wait() }()
	}
	for i, p := range ps {
		want := fmt.Sprintf("0 %d 65536", testRangeFirst+uint32(i)*HostRangeSize)
		for _, f := range []string{"uid_map", "gid_map"} {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", p.Pid(), f))
			if got := strings.Join(strings.Fields(string(b)), " "); err != nil || got != want {
				t.Errorf("sandbox %d's %s is %q (%v), want %q", i, f, got, err, want)
			}
		}
		if id := p.HostIdentity(); id.UID != testRangeFirst+uint32(i)*HostRangeSize || id.GID != id.UID {
			t.Errorf("sandbox %d: root inside is host %+v", i, id)
		}
	}
	_, err := Start(context.Background(), &Config{Args: []string{"/bin/true"}}, Stdio{}, space)
	if !errors.Is(err, ErrHostRangesExhausted) || !strings.Contains(err.Error(), "ranges") {
		t.Fatalf("a third sandbox in a space of two: %v, want ErrHostRangesExhausted naming the directory", err)
	}
	ps[0].Signal(syscall.SIGKILL)
	ps[0].Wait()
	r := mustRun(t, &Config{Args: []string{"/bin/cat", "/proc/self/uid_map"}}, space)
	if got := strings.Fields(r.stdout); len(got) != 3 || got[1] != strconv.Itoa(testRangeFirst) {
		t.Fatalf("after the first ended, the next sandbox maps %q, want the freed block %d", r.stdout, testRangeFirst)
	}
}

// The two allocators never hand one host id to two running sandboxes:
// many sandboxes started at once from moat's default spaces, single ids
// (moat run, the providers) and ranges (moat-runtime) side by side, hold
// pairwise disjoint host ids, none of them host root; pods (a sandbox
// with a range and one sharing it, WithSharedRange) have one range each,
// never another pod's or sandbox's; and a map a caller
// gives (WithIDMaps) that reaches into either space is refused, so an
// engine's maps cannot collide with moat's allocations either.
func TestHostIDsNeverShared(t *testing.T) {
	rootOnly(t)
	type held struct {
		first, size uint64
		sandbox     int
		what        string
	}
	var (
		mu   sync.Mutex
		all  []held
		wg   sync.WaitGroup
		errs = make(chan error, 64)
	)
	record := func(p *Process, n int, what string) {
		uids, gids := p.IDMaps()
		mu.Lock()
		defer mu.Unlock()
		for _, m := range append(uids, gids...) {
			all = append(all, held{uint64(m.Host), uint64(m.Size), n, fmt.Sprintf("sandbox %d (%s) %+v", n, what, m)})
		}
	}
	spawn := func(opts ...Option) *Process {
		p, err := Start(context.Background(), &Config{Args: []string{"/bin/sleep", "60"}}, Stdio{}, opts...)
		if err != nil {
			errs <- err
			return nil
		}
		t.Cleanup(func() { p.Signal(syscall.SIGKILL); p.Wait() })
		return p
	}
	start := func(ranged bool, n int) {
		defer wg.Done()
		var opts []Option
		if ranged {
			opts = append(opts, WithHostRange())
		}
		if p := spawn(opts...); p != nil {
			record(p, n, fmt.Sprintf("ranged %v", ranged))
		}
	}
	// A pod: its sandbox and a member sharing its range count as one.
	pod := func(n int) {
		defer wg.Done()
		p := spawn(WithHostRange())
		if p == nil {
			return
		}
		lease, err := p.ShareLease()
		if err != nil {
			errs <- err
			return
		}
		member := spawn(WithSharedRange(lease))
		lease.Close()
		if member == nil {
			return
		}
		if a, b := fmt.Sprint(p.IDMaps()), fmt.Sprint(member.IDMaps()); a != b {
			errs <- fmt.Errorf("pod %d: its member maps %s, the pod %s", n, b, a)
		}
		record(p, n, "a pod")
		record(member, n, "a pod's member")
	}
	for i := range 8 {
		wg.Add(3)
		go start(false, 3*i)
		go start(true, 3*i+1)
		go pod(3*i + 2)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for i, a := range all {
		if a.first == 0 {
			t.Errorf("%s maps host root", a.what)
		}
		for _, b := range all[:i] {
			// A sandbox's own uid and gid maps share their numbers.
			if a.sandbox != b.sandbox && overlaps(a.first, a.size, b.first, b.size) {
				t.Errorf("%s and %s share host ids", a.what, b.what)
			}
		}
	}
	for _, first := range []uint32{HostIDFirst + 5, HostRangeFirst + 3*HostRangeSize + 9} {
		m := []IDMap{{Inside: 0, Host: first - 10, Size: 65536}}
		_, err := Start(context.Background(), &Config{Args: []string{"/bin/true"}}, Stdio{}, WithIDMaps(m, m))
		var ce *ConfigError
		if !errors.As(err, &ce) || !strings.Contains(ce.Reason, "reaches into moat's") {
			t.Errorf("a map onto %d.. reaching into moat's spaces: %v, want a ConfigError saying so", first-10, err)
		}
	}
}

// The reserved spaces are disjoint, above host root, and end before the
// invalid id.
func TestReservedSpaces(t *testing.T) {
	for i, a := range reserved {
		if a.first == 0 || a.first+a.size > 1<<32-1 {
			t.Errorf("%s: %d+%d", a.what, a.first, a.size)
		}
		for _, b := range reserved[:i] {
			if overlaps(a.first, a.size, b.first, b.size) {
				t.Errorf("%s and %s overlap", a.what, b.what)
			}
		}
	}
	if HostRangeFirst%HostRangeSize != 0 || uint64(HostRangeFirst)+HostRangeCount*HostRangeSize > 0x7FFE0000 {
		t.Errorf("the range space %#x+%d blocks is not aligned or reaches systemd's foreign range", HostRangeFirst, HostRangeCount)
	}
}

// A config's own maps (WithIDMaps) are honoured as given when they map no
// host root: the process runs as its uid inside, which is the host id
// the maps give it (a file it writes in its workdir is owned by it). Host
// root in either map, overlapping lines, and a process uid the maps leave
// out are each refused naming the line.
func TestIDMapsHonoured(t *testing.T) {
	rootOnly(t)
	m := []IDMap{{Inside: 0, Host: 300000, Size: 65536}}
	cfg := shell(t, "id -u; cat /proc/self/uid_map; echo x > /work/f")
	cfg.UID, cfg.GID = 1000, 1000
	os.Chmod(cfg.Workdir, 0o777)
	r := mustRun(t, cfg, WithIDMaps(m, m))
	if f := strings.Fields(r.stdout); len(f) != 4 || f[0] != "1000" || f[1] != "0" || f[2] != "300000" || f[3] != "65536" {
		t.Fatalf("inside: %q, want uid 1000 and the map 0 300000 65536", r.stdout)
	}
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(cfg.Workdir, "f"), &st); err != nil || st.Uid != 301000 || st.Gid != 301000 {
		t.Fatalf("the file is owned by %d:%d (%v), want host 301000 (uid 1000 through the map)", st.Uid, st.Gid, err)
	}
	for name, bad := range map[string][2][]IDMap{
		"host root":    {{{Inside: 0, Host: 0, Size: 65536}}, m},
		"gid root":     {m, {{Inside: 0, Host: 0, Size: 1}}},
		"overlap":      {{{Inside: 0, Host: 400000, Size: 10}, {Inside: 5, Host: 500000, Size: 10}}, m},
		"host overlap": {{{Inside: 0, Host: 400000, Size: 10}, {Inside: 10, Host: 400005, Size: 10}}, m},
		"no uid":       {{{Inside: 5000, Host: 400000, Size: 10}}, m},
		"empty":        {nil, m},
		"wraps":        {{{Inside: 0, Host: 4294967290, Size: 10}}, m},
	} {
		_, err := Start(context.Background(), &Config{Args: []string{"/bin/true"}, UID: 0, GID: 0, ExactIDs: true}, Stdio{}, WithIDMaps(bad[0], bad[1]))
		var ce *ConfigError
		if !errors.As(err, &ce) {
			t.Errorf("%s: %v, want a ConfigError", name, err)
		}
	}
}

// Rootless, the only map a caller may give is one id onto its own; a
// range, or another host id, is refused before anything is spawned.
func TestIDMapsRootless(t *testing.T) {
	if os.Geteuid() == 0 && !testenv.ReRun() {
		testenv.RunAsUser(t, testenv.NobodyUID, testenv.NobodyGID)
		return
	}
	own := []IDMap{{Inside: 0, Host: uint32(os.Geteuid()), Size: 1}}
	ownG := []IDMap{{Inside: 0, Host: uint32(os.Getegid()), Size: 1}}
	r := mustRun(t, &Config{Args: []string{"/bin/cat", "/proc/self/uid_map"}, ExactIDs: true}, WithIDMaps(own, ownG))
	if f := strings.Fields(r.stdout); len(f) != 3 || f[1] != strconv.Itoa(os.Geteuid()) || f[2] != "1" {
		t.Fatalf("own id: %q", r.stdout)
	}
	for name, uids := range map[string][]IDMap{
		"a range":  {{Inside: 0, Host: uint32(os.Geteuid()), Size: 2}},
		"other id": {{Inside: 0, Host: uint32(os.Geteuid()) + 1, Size: 1}},
	} {
		_, err := Start(context.Background(), &Config{Args: []string{"/bin/true"}, ExactIDs: true}, Stdio{}, WithIDMaps(uids, ownG))
		var ce *ConfigError
		if !errors.As(err, &ce) || !strings.Contains(ce.Reason, "rootless") {
			t.Errorf("%s: %v, want a ConfigError naming the rootless rule", name, err)
		}
	}
	// WithHostRange rootless (outside an engine's namespace) is the own
	// id alone.
	r = mustRun(t, &Config{Args: []string{"/bin/cat", "/proc/self/uid_map"}}, WithHostRange())
	if f := strings.Fields(r.stdout); len(f) != 3 || f[2] != "1" {
		t.Fatalf("WithHostRange rootless maps %q, want the one own id", r.stdout)
	}
}

// Supplementary groups (Config.Groups, an OCI config's additionalGids):
// as root they are set, in the tool and on every thread of its init, the
// ones inherited from root cleared; a group the maps leave out is refused.
// Rootless setgroups is denied in the sandbox's namespace, so a group
// other than the primary gid is refused with the reason, and the primary
// gid alone is accepted.
func TestSupplementaryGroups(t *testing.T) {
	asRootAndNobody(t, func(t *testing.T) {
		var opts []Option
		if IsHostRoot() {
			opts = append(opts, rangeSpace(t, 1))
		}
		cfg := shell(t, "id -G; echo up; exec sleep 60")
		cfg.UID, cfg.GID, cfg.ExactIDs = 0, 0, true
		cfg.Groups = []uint32{1, 2, 10, 2000}
		if !IsHostRoot() {
			_, err := Start(context.Background(), cfg, Stdio{}, opts...)
			var ce *ConfigError
			if !errors.As(err, &ce) || !strings.Contains(ce.Reason, "setgroups") {
				t.Fatalf("rootless groups: %v, want a ConfigError naming setgroups", err)
			}
			cfg.Groups = []uint32{cfg.GID}
			cfg.Args = []string{"/bin/true"}
			mustRun(t, cfg, opts...)
			return
		}
		outR, outW, _ := os.Pipe()
		p, err := Start(context.Background(), cfg, Stdio{Stdout: outW, Stderr: outW}, opts...)
		outW.Close()
		if err != nil {
			t.Fatal(err)
		}
		defer func() { p.Signal(syscall.SIGKILL); p.Wait(); outR.Close() }()
		br := bufio.NewReader(outR)
		if line, _ := br.ReadString('\n'); line != "0 1 2 10 2000\n" {
			t.Fatalf("id -G inside: %q, want 0 1 2 10 2000", line)
		}
		br.ReadString('\n')
		base := p.HostIdentity().UID
		want := fmt.Sprintf("%d %d %d %d", base+1, base+2, base+10, base+2000)
		tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", p.Pid()))
		for _, task := range tasks {
			if got := statusField(t, fmt.Sprintf("/proc/%d/task/%s/status", p.Pid(), task.Name()), "Groups"); got != want {
				t.Errorf("init thread %s has groups %q, want %q", task.Name(), got, want)
			}
		}

		single := shell(t, "true")
		single.Groups = []uint32{5}
		_, err = Start(context.Background(), single, Stdio{})
		var ce *ConfigError
		if !errors.As(err, &ce) || !strings.Contains(ce.Reason, "not mapped") {
			t.Fatalf("a group outside a one-id map: %v, want a ConfigError saying it is not mapped", err)
		}
	})
}

// ShareLease: a copy of a sandbox's lease descriptor keeps its range held
// after the sandbox and the process that started it are gone (a pod's
// container holding the pod's range), and the range is free once the copy
// closes.
func TestShareLeaseHoldsTheRange(t *testing.T) {
	rootOnly(t)
	dir := filepath.Join(t.TempDir(), "ranges")
	self, _ := os.Executable()
	holder := exec.Command(self)
	holder.Env = append(os.Environ(), helperVar+"=share-range", holdVar+"="+dir)
	holder.Stderr = os.Stderr
	out, _ := holder.StdoutPipe()
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { holder.Process.Kill(); holder.Wait() }()
	var keeper int
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || func() error { _, err := fmt.Sscanf(line, "keeper %d", &keeper); return err }() != nil {
		t.Fatalf("the holder said %q (%v)", line, err)
	}
	defer unix.Kill(keeper, unix.SIGKILL)
	holder.Process.Signal(syscall.SIGKILL)
	holder.Wait()
	space := WithHostRangeSpace(dir, testRangeFirst, 1)
	_, err := Start(context.Background(), &Config{Args: []string{"/bin/true"}}, Stdio{}, space)
	if !errors.Is(err, ErrHostRangesExhausted) {
		t.Fatalf("with the holder gone and a copy of its lease alive: %v, want ErrHostRangesExhausted", err)
	}
	// The keeper is not this process's child, so it is not waited for:
	// its descriptors close as it dies, and the range is free then.
	unix.Kill(keeper, unix.SIGKILL)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		_, err := run(t, &Config{Args: []string{"/bin/true"}}, space)
		if err == nil {
			return
		}
		if !errors.Is(err, ErrHostRangesExhausted) || time.Now().After(deadline) {
			t.Fatalf("after the copy's holder died: %v, want the range free", err)
		}
	}
}

func init() { helpers["share-range"] = helperShareRange }

// helperShareRange starts a sandbox in a one-block range space, hands a
// copy of its lease to a sleeping process of its own (which the test
// keeps), says "keeper PID" and waits to be killed.
func helperShareRange() error {
	p, err := Start(context.Background(), &Config{Args: []string{"/bin/sleep", "60"}}, Stdio{},
		WithHostRangeSpace(os.Getenv(holdVar), testRangeFirst, 1))
	if err != nil {
		return err
	}
	f, err := p.ShareLease()
	if err != nil {
		return err
	}
	keeper := exec.Command("/bin/sleep", "60")
	keeper.ExtraFiles = []*os.File{f}
	keeper.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := keeper.Start(); err != nil {
		return err
	}
	f.Close()
	fmt.Printf("keeper %d\n", keeper.Process.Pid)
	p.Wait()
	return nil
}
