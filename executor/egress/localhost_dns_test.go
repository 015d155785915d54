package egress

import (
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/moat-sandbox/moat/conformance/testenv"
	"github.com/moat-sandbox/moat/policies"
	"golang.org/x/sys/unix"
)

// inNetnsVar marks the copy of the test binary that runs in a network and
// mount namespace of its own (TestLocalhostNeverReachesDNS).
const inNetnsVar = "MOAT_EGRESS_TEST_NETNS"

// TestLocalhostNeverReachesDNS: with the host's own resolver (no test
// resolver), localhost names reach a server on the loopback, and no query
// for them reaches the DNS server, while one for another allowed name
// does. The test runs in a copy of itself in a network namespace of its
// own, whose resolv.conf (bind-mounted in a private mount namespace) names
// a DNS server of the test's on 127.0.0.1:53 that records every query and
// answers NXDOMAIN. Before, "localhost." missed the hosts file and was
// asked of that server: a 502.
func TestLocalhostNeverReachesDNS(t *testing.T) {
	if os.Getenv(inNetnsVar) == "" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestLocalhostNeverReachesDNS$", "-test.v", "-test.count=1")
		cmd.Env = append(os.Environ(), inNetnsVar+"=1")
		cmd.SysProcAttr = testenv.PrivateMounts()
		cmd.SysProcAttr.Cloneflags |= syscall.CLONE_NEWNET
		out, err := cmd.CombinedOutput()
		t.Logf("in a network namespace of its own:\n%s", out)
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			testenv.Skipf(t, "a mount and network namespace for the test: %v", err)
		}
		if err != nil || !strings.Contains(string(out), "--- PASS: TestLocalhostNeverReachesDNS") {
			t.Fatalf("the namespaced run failed: %v", err)
		}
		return
	}
	dns := netnsWithDNS(t)
	srv := newCountingServer(t)
	sp := port(t, srv.Server)
	p, err := New() // the host's resolver
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	s := open(t, p, policies.Egress{Allow: []string{"localhost:" + sp, "*.localhost:" + sp, "ctl.test"}, CIDRs: []string{"127.0.0.1/32:" + sp}})
	c := client(s)
	for _, host := range []string{"localhost", "LOCALHOST.", "app.localhost"} {
		u := "http://" + host + ":" + sp + "/"
		if code, body := fetch(c, u); code != 200 || !strings.HasPrefix(body, "hello ") {
			t.Errorf("GET %s with the host's resolver: %d %q", u, code, body)
		}
	}
	if conn, code := socksConnect(t, s, "localhost.", sp); code != socksOK {
		t.Errorf("SOCKS5 localhost. with the host's resolver: reply %d", code)
	} else {
		conn.Close()
	}
	// The control: another allowed name is asked of the test's server,
	// so a query for localhost could not have gone elsewhere unseen.
	if code, _ := fetch(c, "http://ctl.test:"+sp+"/"); code != http.StatusBadGateway {
		t.Errorf("ctl.test, which the DNS server does not know: %d, want 502", code)
	}
	asked := dns.names()
	if !strings.Contains(strings.Join(asked, " "), "ctl.test.") {
		t.Fatalf("the DNS server saw %q, not ctl.test.: the namespace's resolver does not ask it, and the test proves nothing", asked)
	}
	for _, n := range asked {
		if strings.Contains(strings.ToLower(n), "localhost") {
			t.Errorf("the DNS server was asked for %q", n)
		}
	}
}

// dnsRecorder is a DNS server on 127.0.0.1:53 (UDP) that records the name
// of every query and answers NXDOMAIN.
type dnsRecorder struct {
	mu    sync.Mutex
	asked []string
}

func (d *dnsRecorder) names() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.asked...)
}

// netnsWithDNS prepares the namespaced copy: private mounts, lo up, the
// recording DNS server, and a resolv.conf naming it bind-mounted over the
// host's (in this mount namespace only).
func netnsWithDNS(t *testing.T) *dnsRecorder {
	t.Helper()
	// Nothing mounted here may propagate to the host's namespace.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		t.Fatalf("make the mounts private: %v", err)
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		t.Fatal(err)
	}
	ifr.SetUint16(unix.IFF_UP | unix.IFF_LOOPBACK | unix.IFF_RUNNING)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		t.Fatalf("bring lo up: %v", err)
	}
	pc, err := net.ListenPacket("udp4", "127.0.0.1:53")
	if err != nil {
		t.Fatalf("listen on 127.0.0.1:53 in the namespace: %v", err)
	}
	t.Cleanup(func() { pc.Close() })
	d := &dnsRecorder{}
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			name, ok := questionName(buf[:n])
			if !ok {
				continue
			}
			d.mu.Lock()
			d.asked = append(d.asked, name)
			d.mu.Unlock()
			reply := append([]byte(nil), buf[:n]...)
			reply[2] |= 0x80                       // QR: a response
			reply[3] = reply[3]&0x70 | 0x80 | 0x03 // RA, RCODE 3: NXDOMAIN
			pc.WriteTo(reply, from)
		}
	}()
	conf := filepath.Join(t.TempDir(), "resolv.conf")
	if err := os.WriteFile(conf, []byte("nameserver 127.0.0.1\noptions timeout:1 attempts:1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(conf, "/etc/resolv.conf", "", unix.MS_BIND, ""); err != nil {
		t.Fatalf("bind the test's resolv.conf: %v", err)
	}
	return d
}

// questionName reads the first question's name of a DNS query (RFC 1035
// section 4.1), rooted.
func questionName(msg []byte) (string, bool) {
	if len(msg) < 12 || msg[4] == 0 && msg[5] == 0 {
		return "", false
	}
	var labels []string
	for i := 12; i < len(msg); {
		l := int(msg[i])
		if l == 0 {
			return strings.Join(labels, ".") + ".", true
		}
		if l > 63 || i+1+l > len(msg) {
			return "", false
		}
		labels = append(labels, string(msg[i+1:i+1+l]))
		i += 1 + l
	}
	return "", false
}
