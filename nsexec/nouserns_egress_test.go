//go:build linux

package nsexec

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/conformance/testenv"
	"github.com/moat-sandbox/moat/executor/egress"
	"github.com/moat-sandbox/moat/policies"
)

// noUserNSEgressTool is the tool of TestNoUserNSEgressPortOnly, one
// "name:result" line each (as noUserNSAttacks). argv: the proxy's port,
// the allowed host:port to fetch through it, another TCP port on
// 127.0.0.1 (a listener of the host's).
const noUserNSEgressTool = `
import os, socket, sys
proxy, target, other = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
def attempt(name, f):
    try:
        r = f()
        print(name + ":" + (r if r else "ok"))
    except OSError as e:
        print(name + ":" + (os.strerror(e.errno) if e.errno else str(e)).replace(" ", "_"))
def fetch():
    s = socket.create_connection(("127.0.0.1", proxy), timeout=10)
    s.sendall(("GET http://%s/ HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n" % (target, target)).encode())
    got = b""
    while True:
        d = s.recv(4096)
        if not d:
            break
        got += d
    return "ok" if b"hello " + target.encode() in got else "no_greeting"
def connect_other():
    socket.create_connection(("127.0.0.1", other), timeout=5).close()
def bind():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
def listen():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.listen(1)  # binds an ephemeral port on every address first
def fastopen():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.sendto(b"x", 0x20000000, ("127.0.0.1", other))  # MSG_FASTOPEN
def sock(family, kind, proto=0):
    return lambda: socket.socket(family, kind, proto).close()
attempt("proxy", fetch)
attempt("tcp6", sock(socket.AF_INET6, socket.SOCK_STREAM, socket.IPPROTO_TCP))
attempt("other-port", connect_other)
attempt("bind", bind)
attempt("listen", listen)
attempt("fastopen", fastopen)
attempt("udp", sock(socket.AF_INET, socket.SOCK_DGRAM))
attempt("udp6", sock(socket.AF_INET6, socket.SOCK_DGRAM))
attempt("icmp", sock(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP))
attempt("raw", sock(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_TCP))
attempt("sctp", sock(socket.AF_INET, socket.SOCK_STREAM, 132))
attempt("mptcp", sock(socket.AF_INET, socket.SOCK_STREAM, 262))
attempt("unix", sock(socket.AF_UNIX, socket.SOCK_STREAM))
attempt("netlink", sock(socket.AF_NETLINK, socket.SOCK_RAW))
`

// TestNoUserNSEgressPortOnly: with EgressTCP the rung's tool reaches the
// proxy's loopback port (egress.Proxy.OpenLoopback, which admits it by
// its socket's uid) and fetches an allowed host through it, and nothing
// else of the network: another port of 127.0.0.1, a bind, a listen's
// autobind, TCP Fast Open's implicit connect, UDP, ICMP, raw, SCTP,
// MPTCP, unix and netlink sockets are refused; what the tool is refused
// is checked to work unsandboxed, where it can. Below Landlock ABI 4 the
// egress is refused, naming the ABI (TestNoUserNSEgressBelowABI).
func TestNoUserNSEgressPortOnly(t *testing.T) {
	inNoUserNS(t, func(t *testing.T) {
		py := "/usr/bin/python3"
		cfg, ok := noUserNSConfig(t, py, "-c", noUserNSEgressTool)
		if !ok {
			return
		}
		if _, err := os.Stat(py); err != nil {
			testenv.Skipf(t, "no %s: %v", py, err)
		}
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintf(w, "hello %s", r.Host) }))
		defer srv.Close()
		target := "api.test:" + strconv.Itoa(srv.Listener.Addr().(*net.TCPAddr).Port)
		p, err := egress.New(egress.WithResolver(egress.Hosts{"api.test": {netip.MustParseAddr("127.0.0.1")}}))
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		al, err := egress.NewAllowlist(&policies.Egress{Allow: []string{"api.test"}, CIDRs: []string{"127.0.0.1/32"}})
		if err != nil {
			t.Fatal(err)
		}
		sb, err := p.OpenLoopback(al)
		if err != nil {
			t.Fatal(err)
		}
		defer sb.Close()
		other := closingListener(t, "tcp", "127.0.0.1:0")
		args := []string{strconv.Itoa(int(sb.Port())), target, strconv.Itoa(other.Addr().(*net.TCPAddr).Port)}
		cfg.EgressTCP = sb.Port()
		cfg.Args = append(cfg.Args, args...)
		if LandlockABI() < NoUserNSEgressABI {
			requireEgressABIRefusal(t, cfg)
			return
		}
		r, err := run(t, cfg)
		if err != nil || r.exit.Code != 0 {
			t.Fatalf("the tool in the rung: %v %+v\n%s\n%s", err, r.exit, r.stdout, r.stderr)
		}
		got := attackResults(t, r.stdout)
		plain := exec.Command(py, append([]string{"-c", noUserNSEgressTool}, args...)...)
		var stderr strings.Builder
		plain.Stderr = &stderr
		b, err := plain.Output()
		if err != nil {
			t.Fatalf("unsandboxed: %v\n%s\n%s", err, b, stderr.String())
		}
		free := attackResults(t, string(b))
		for _, a := range []string{"proxy", "tcp6"} {
			if got[a] != "ok" {
				t.Errorf("%s: %q in the rung with egress, want ok", a, got[a])
			}
		}
		for _, a := range []string{"other-port", "bind", "listen", "udp", "udp6", "icmp", "raw", "sctp", "mptcp", "unix", "netlink", "fastopen"} {
			if got[a] == "ok" || got[a] == "" {
				t.Errorf("%s: %q in the rung with egress, want refused", a, got[a])
			}
			switch a {
			case "other-port", "bind", "listen", "udp", "udp6", "unix", "netlink":
				if free[a] != "ok" {
					t.Errorf("%s: unsandboxed it fails (%s), so the rung's refusal would prove nothing", a, free[a])
				}
			default: // the host may lack the protocol or privilege (raw, ICMP, SCTP, MPTCP, TFO's client bit)
				t.Logf("%s: %s in the rung, %s unsandboxed", a, got[a], free[a])
			}
		}
		if u := sb.Usage(); u.Connections < 1 || u.Denials != 0 {
			t.Errorf("the proxy's usage %+v: want the tool's fetch, as the sandbox's uid, and no denial", u)
		}
	})
}

// requireEgressABIRefusal checks that cfg, with EgressTCP, is refused
// with the *EgressModeError naming the ABI it needs and this kernel's.
func requireEgressABIRefusal(t *testing.T, cfg *Config) {
	t.Helper()
	_, err := run(t, cfg)
	var ee *EgressModeError
	if !errors.As(err, &ee) || ee.Mode != ModeNoUserNS || ee.Need != NoUserNSEgressABI || ee.Have != LandlockABI() {
		t.Fatalf("egress below Landlock ABI %d (this kernel has %d): got %v, want an *EgressModeError", NoUserNSEgressABI, LandlockABI(), err)
	}
	if msg := err.Error(); !strings.Contains(msg, "ABI "+strconv.Itoa(NoUserNSEgressABI)) || !strings.Contains(msg, "ABI "+strconv.Itoa(LandlockABI())) {
		t.Fatalf("the refusal names neither ABI: %v", err)
	}
}

// Below Landlock ABI 4 egress in the rung is refused with the
// *EgressModeError naming both ABIs: raised here to one above this
// kernel's, as a 6.1 kernel's ABI 3 would refuse it for real.
func TestNoUserNSEgressBelowABI(t *testing.T) {
	inNoUserNS(t, func(t *testing.T) {
		defer func(v int) { NoUserNSEgressABI = v }(NoUserNSEgressABI)
		NoUserNSEgressABI = LandlockABI() + 1
		cfg, ok := noUserNSConfig(t, "/bin/true")
		if !ok {
			return // the rung itself is refused (noUserNSConfig checked it)
		}
		cfg.EgressTCP = 3128
		requireEgressABIRefusal(t, cfg)
	})
}

// EgressTCP is the rung's: a sandbox with namespaces is refused it.
func TestEgressTCPNeedsTheRung(t *testing.T) {
	_, err := Start(context.Background(), &Config{Args: []string{"/bin/true"}, EgressTCP: 3128}, Stdio{})
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.Field != "egressTCP" {
		t.Fatalf("EgressTCP outside the rung: %v, want a *ConfigError on egressTCP", err)
	}
}
