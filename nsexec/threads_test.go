//go:build linux

package nsexec

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

func init() { probes["dropped-again"] = probeDroppedAgain }

// holdThreads starts n goroutines, each locked to a thread of its own, so
// the runtime must start a thread for each; release ends them.
func holdThreads(n int) (release func()) {
	stop := make(chan struct{})
	for range n {
		go func() {
			runtime.LockOSThread()
			<-stop
		}()
	}
	return func() { close(stop) }
}

// probeDroppedAgain runs the init's whole privilege drop on every thread of
// the tool, each of which is in the drop's state already (no capability,
// locked securebits, no_new_privs, the sandbox's ids), as a thread the
// runtime makes from one that has dropped is born.
func probeDroppedAgain() error {
	defer holdThreads(8)()
	calls, target, err := privilegeDrop(uint32(os.Getuid()), uint32(os.Getgid()), nil, false, nil, broadcastBounding)
	if err != nil {
		return err
	}
	if e := onEveryThread(calls, target); e != nil {
		return fmt.Errorf("%s: %v", e.detail, e.errno)
	}
	fmt.Println("ok")
	return nil
}

// TestBroadcastLeavesDroppedThreads: a thread already in the drop's state
// is left as it is. The runtime may start a thread from one that has
// dropped while the broadcast runs; the calls that need a capability
// (setgroups, the bounding set, securebits) failed on it with EPERM, and
// one cold start in a hundred on a loaded host failed its setup so. The
// tool, every thread of which is in that state, runs the whole drop.
func TestBroadcastLeavesDroppedThreads(t *testing.T) {
	if !haveTail {
		t.Skip("without cgo the runtime's all-threads call runs the drop: no thread can be in its state before it")
	}
	if r := mustRun(t, probeConfig(t, "dropped-again")); r.stdout != "ok\n" {
		t.Fatalf("stdout %q, stderr %q", r.stdout, r.stderr)
	}
}

// TestEveryInitThreadDrops: once the tool runs, every thread of its
// sandbox's init, not the exec thread alone, is the sandbox's host id with
// no supplementary group, no capability in any set, no_new_privs and the
// filter: the Go init of a cold start and whichever init a prepared
// sandbox has, as root and as an unprivileged user. The Go init's runtime
// threads used to stay host uid 0 with the init's capabilities.
func TestEveryInitThreadDrops(t *testing.T) {
	bothInits(t, func(t *testing.T, prepared bool) {
		cfg := shell(t, "echo up; exec sleep 60")
		cfg.Seccomp = denyMkdirat(t)
		p, out := startPiped(t, cfg, prepared)
		defer func() {
			p.Signal(syscall.SIGKILL)
			p.Wait()
			out.Close()
		}()
		if line, err := bufio.NewReader(out).ReadString('\n'); line != "up\n" {
			t.Fatalf("the tool said %q (%v)", line, err)
		}
		checkEveryThread(t, p.Pid(), sandboxHostID(p))
	})
}

// sandboxHostID is the host id p's sandbox runs as: the one it was given
// as root, the caller's own rootless.
func sandboxHostID(p *Process) Identity {
	if os.Geteuid() != 0 {
		return Identity{UID: uint32(os.Geteuid()), GID: uint32(os.Getegid())}
	}
	return p.HostIdentity()
}

// checkEveryThread reads each thread's status from the host's /proc.
func checkEveryThread(t *testing.T, pid int, id Identity) {
	t.Helper()
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil || len(tasks) == 0 {
		t.Fatalf("the init's threads: %v", err)
	}
	uid, gid := fmt.Sprint(id.UID), fmt.Sprint(id.GID)
	// Rootless, the launcher's supplementary groups stay: its user
	// namespace must deny setgroups before the gid map is written
	// (user_namespaces(7)), so no thread of the sandbox can drop them.
	groups := ""
	if os.Geteuid() != 0 {
		groups = statusField(t, "/proc/self/status", "Groups")
	}
	want := map[string]string{
		"Uid": strings.Repeat(uid+" ", 3) + uid, "Gid": strings.Repeat(gid+" ", 3) + gid, "Groups": groups,
		"CapInh": "0000000000000000", "CapPrm": "0000000000000000", "CapEff": "0000000000000000",
		"CapBnd": "0000000000000000", "CapAmb": "0000000000000000", "NoNewPrivs": "1", "Seccomp": "2",
	}
	for _, task := range tasks {
		got := statusFields(t, fmt.Sprintf("/proc/%d/task/%s/status", pid, task.Name()))
		for k, v := range want {
			if k == "CapBnd" && !broadcastBounding && task.Name() != fmt.Sprint(pid) {
				continue // without cgo the exec thread alone (broadcastBounding)
			}
			if got[k] != v {
				t.Errorf("thread %s of %d of the init (%s): %s is %q, want %q", task.Name(), len(tasks), got["Name"], k, got[k], v)
			}
		}
	}
}

// statusFields reads a /proc status file into its fields, each value's
// words joined by one space.
func statusFields(t *testing.T, path string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			got[k] = strings.Join(strings.Fields(v), " ")
		}
	}
	return got
}

func statusField(t *testing.T, path, key string) string {
	t.Helper()
	return statusFields(t, path)[key]
}

// TestEgressRelayConnectsAsTheSandbox: the init's egress relay reaches the
// host's proxy as the sandbox's host id, which the proxy checks
// (SO_PEERCRED), never as the launcher's root.
func TestEgressRelayConnectsAsTheSandbox(t *testing.T) {
	asRootAndNobody(t, func(t *testing.T) {
		peers := make(chan uint32, 16)
		sock := egressSocket(t, func(c net.Conn) {
			defer c.Close()
			raw, err := c.(*net.UnixConn).SyscallConn()
			if err != nil {
				return
			}
			raw.Control(func(fd uintptr) {
				if cred, err := unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED); err == nil {
					peers <- cred.Uid
				}
			})
			line, _ := bufio.NewReader(c).ReadString('\n')
			fmt.Fprintf(c, "proxy got %s", line)
		})
		cfg := probeConfig(t, "egress")
		cfg.Network = NetworkLoopback
		cfg.Egress = &Egress{Port: 3128, Socket: "/tmp/.moat-egress.sock"}
		cfg.Mounts = append(cfg.Mounts, specs.Mount{Source: sock, Destination: "/tmp/.moat-egress.sock", Options: []string{"ro"}})
		p, out := startPiped(t, cfg, false)
		b, _ := io.ReadAll(out)
		out.Close()
		if e, err := p.Wait(); err != nil || e.Code != 0 || !strings.HasPrefix(string(b), "answer: proxy got hello\n") {
			t.Fatalf("egress probe: %+v %v\n%s", e, err, b)
		}
		select {
		case uid := <-peers:
			if want := sandboxHostID(p).UID; uid != want {
				t.Errorf("the relay connected as host uid %d, want the sandbox's %d", uid, want)
			}
		default:
			t.Fatal("the proxy saw no connection")
		}
	})
}

// bcName is a thread name for TestBroadcastReachesEveryThread
// (PR_SET_NAME reads up to 16 bytes, NUL-terminated).
var bcName = [16]byte{'m', 'o', 'a', 't', '-', 'b', 'c'}

// TestBroadcastReachesEveryThread: onEveryThread makes its calls on every
// thread of the process, threads the runtime starts while it runs
// included, so none is left as it was. The call here renames the calling
// thread (PR_SET_NAME, per thread like credentials, and inherited by a
// thread from the one that made it): afterwards every thread of this test
// process has the name, while goroutines locked to threads of their own
// keep making new ones. (The narrower race the rescan is for, a thread
// made by one not yet reached, is not forced here: a test cannot time it.)
func TestBroadcastReachesEveryThread(t *testing.T) {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	// A goroutine that stays locked to its thread until stop: the runtime
	// must start a new thread for each.
	hold := func() {
		defer wg.Done()
		runtime.LockOSThread()
		<-stop
	}
	defer func() {
		close(stop)
		wg.Wait() // each exits locked, which ends its thread
	}()
	for range 16 {
		wg.Add(1)
		go hold()
	}
	churned := make(chan struct{})
	go func() {
		defer close(churned)
		for range 200 {
			wg.Add(1)
			go hold()
			time.Sleep(20 * time.Microsecond)
		}
	}()
	calls := []threadCall{{nr: unix.SYS_PRCTL, args: [5]uintptr{unix.PR_SET_NAME, uintptr(unsafe.Pointer(&bcName[0]))}, what: "rename"}}
	time.Sleep(time.Millisecond)
	if err := onEveryThread(calls, nil); err != nil {
		t.Fatalf("%s: %v", err.detail, err.errno)
	}
	<-churned
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	var missed []string
	for _, task := range tasks {
		b, err := os.ReadFile("/proc/self/task/" + task.Name() + "/comm")
		if err != nil {
			continue // gone meanwhile
		}
		if name := strings.TrimSpace(string(b)); name != "moat-bc" {
			missed = append(missed, task.Name()+" "+name)
		}
	}
	if len(missed) > 0 {
		t.Fatalf("%d of %d threads kept their name: %v", len(missed), len(tasks), missed)
	}
	t.Logf("%d threads, every one reached", len(tasks))
}

// BenchmarkEveryThread is the cost of one broadcast in a process with
// eight threads besides the runtime's: 50 calls (about as many as the
// privilege drop makes) on each.
func BenchmarkEveryThread(b *testing.B) {
	defer holdThreads(8)()
	call := threadCall{nr: unix.SYS_PRCTL, args: [5]uintptr{unix.PR_SET_NAME, uintptr(unsafe.Pointer(&bcName[0]))}, what: "rename"}
	calls := make([]threadCall, 50)
	for i := range calls {
		calls[i] = call
	}
	for b.Loop() {
		if err := onEveryThread(calls, nil); err != nil {
			b.Fatalf("%s: %v", err.detail, err.errno)
		}
	}
}
