//go:build linux

package nsexec

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

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
	want := map[string]string{
		"Uid": strings.Repeat(uid+" ", 3) + uid, "Gid": strings.Repeat(gid+" ", 3) + gid, "Groups": "",
		"CapInh": "0000000000000000", "CapPrm": "0000000000000000", "CapEff": "0000000000000000",
		"CapBnd": "0000000000000000", "CapAmb": "0000000000000000", "NoNewPrivs": "1", "Seccomp": "2",
	}
	for _, task := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/status", pid, task.Name()))
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok {
				got[k] = strings.Join(strings.Fields(v), " ")
			}
		}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("thread %s of %d of the init (%s): %s is %q, want %q", task.Name(), len(tasks), got["Name"], k, got[k], v)
			}
		}
	}
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
