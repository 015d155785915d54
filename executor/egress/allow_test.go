package egress

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/moat-sandbox/moat/policies"
)

// countingServer is a plain HTTP server on 127.0.0.1 that counts the
// connections it accepted, so a test can tell a refused destination was
// never reached.
type countingServer struct {
	*httptest.Server
	conns atomic.Int32
}

func newCountingServer(t *testing.T) *countingServer {
	t.Helper()
	s := &countingServer{Server: httptest.NewUnstartedServer(http.HandlerFunc(hello))}
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			s.conns.Add(1)
		}
	}
	s.Start()
	t.Cleanup(s.Close)
	return s
}

// fetch gets u through the sandbox: plain HTTP for http://, CONNECT for
// https://. It returns the status (0 when the client failed) and the body
// or the error's text.
func fetch(c *http.Client, u string) (int, string) {
	resp, err := c.Get(u)
	if err != nil {
		// A refused CONNECT is the client's error, with the status in it.
		if strings.Contains(err.Error(), "Forbidden") {
			return http.StatusForbidden, err.Error()
		}
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestCIDRPortAdmitsThatPortOnly: a range with a port lets the tool reach
// its addresses on that port, as raw addresses and behind an allowed name,
// over every protocol; the same address on another port is refused, and
// the server there never sees a connection. Before ports, 127.0.0.1/32
// was the only way to reach one local server, and it opened every port.
func TestCIDRPortAdmitsThatPortOnly(t *testing.T) {
	open1, closed := newCountingServer(t), newCountingServer(t)
	op, cp := port(t, open1.Server), port(t, closed.Server)
	p := newProxy(t)
	s := open(t, p, policies.Egress{Allow: []string{"api.test"}, CIDRs: []string{"127.0.0.1/32:" + op}})
	c := client(s)
	for _, u := range []string{"http://127.0.0.1:" + op + "/", "http://api.test:" + op + "/"} {
		if code, body := fetch(c, u); code != 200 || !strings.HasPrefix(body, "hello ") {
			t.Errorf("GET %s, the admitted port: %d %q", u, code, body)
		}
	}
	if _, code := socksConnect(t, s, "api.test", op); code != socksOK {
		t.Errorf("SOCKS5 to api.test on the admitted port: reply %d", code)
	}
	for _, tc := range []struct{ url, reason string }{
		{"http://127.0.0.1:" + cp + "/", "admit 127.0.0.1 on port " + op + " only"},
		{"http://api.test:" + cp + "/", "127.0.0.1 is loopback, and egress.cidrs admits it on port " + op + " only"},
		{"http://[::ffff:127.0.0.1]:" + cp + "/", "admit 127.0.0.1 on port " + op + " only"},
		{"http://127.0.0.2:" + op + "/", "127.0.0.2 is not"},
	} {
		for _, scheme := range []string{"http", "https"} {
			u := strings.Replace(tc.url, "http:", scheme+":", 1)
			code, body := fetch(c, u)
			if code != http.StatusForbidden || scheme == "http" && !strings.Contains(body, tc.reason) {
				t.Errorf("GET %s: %d %q, want 403 saying %q", u, code, body, tc.reason)
			}
		}
	}
	if _, code := socksConnect(t, s, "api.test", cp); code != socksNotAllowed {
		t.Errorf("SOCKS5 to api.test on another port: reply %d, want %d", code, socksNotAllowed)
	}
	if got := closed.conns.Load(); got != 0 {
		t.Errorf("the server on the port no range admits was reached %d times", got)
	}
	// IPv6: [::1]:PORT admits ::1 on that port only.
	s6 := open(t, p, policies.Egress{CIDRs: []string{"[::1]:" + op}})
	for _, tc := range []struct {
		port string
		deny bool
	}{{op, false}, {cp, true}} {
		_, err := s6.dial(context.Background(), "[::1]", mustPort(t, tc.port))
		var d *Denial
		if errors.As(err, &d) != tc.deny {
			t.Errorf("[::1]:%s with [::1]:%s admitted: %v, want denied=%v", tc.port, op, err, tc.deny)
		}
	}
}

func mustPort(t *testing.T, s string) uint16 {
	t.Helper()
	ap, err := netip.ParseAddrPort("127.0.0.1:" + s)
	if err != nil {
		t.Fatal(err)
	}
	return ap.Port()
}

// recordingResolver records every name it is asked for and answers from
// Hosts.
type recordingResolver struct {
	Hosts
	mu    sync.Mutex
	asked []string
}

func (r *recordingResolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	r.asked = append(r.asked, host)
	r.mu.Unlock()
	return r.Hosts.LookupNetIP(ctx, network, host)
}

func (r *recordingResolver) names() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.asked...)
}

// TestLocalhostIsTheLoopbackNeverLookedUp: localhost and the names below
// it, however the tool spells them (CONNECT, an absolute URI, a SOCKS5
// name; upper case, a trailing dot), reach the host's loopback on the
// ports the ranges admit, and never reach the resolver, which is asked for
// the other allowed names as usual. Before, the proxy looked up
// "localhost.", which the hosts file does not answer: a 502, after a query
// to the host's DNS server.
func TestLocalhostIsTheLoopbackNeverLookedUp(t *testing.T) {
	srv, other := newCountingServer(t), newCountingServer(t)
	sp, op := port(t, srv.Server), port(t, other.Server)
	p := newProxy(t)
	r := &recordingResolver{Hosts: testNames}
	p.resolver = r
	s := open(t, p, policies.Egress{Allow: []string{"localhost:" + sp, "*.localhost:" + sp, "api.test"}, CIDRs: []string{"127.0.0.1/32:" + sp}})
	c := client(s)
	for _, host := range []string{"localhost", "LOCALHOST", "localhost.", "LocalHost.", "app.localhost", "A.B.LOCALHOST."} {
		for _, scheme := range []string{"http", "https"} { // https: a CONNECT the TLS client gives up on, after the 200
			u := scheme + "://" + host + ":" + sp + "/"
			code, body := fetch(c, u)
			if scheme == "http" && (code != 200 || !strings.HasPrefix(body, "hello ")) {
				t.Errorf("GET %s: %d %q, want the loopback server's greeting", u, code, body)
			}
			if scheme == "https" && code == http.StatusForbidden {
				t.Errorf("CONNECT %s refused: %s", u, body)
			}
		}
		if conn, code := socksConnect(t, s, host, sp); code != socksOK {
			t.Errorf("SOCKS5 %q: reply %d, want %d", host, code, socksOK)
		} else {
			conn.Close()
		}
	}
	// Refused, and not looked up either: another port, an empty label.
	for _, u := range []string{"http://localhost:" + op + "/", "http://localhost..:" + sp + "/", "http://.localhost:" + sp + "/", "http://a..localhost:" + sp + "/"} {
		if code, body := fetch(c, u); code != http.StatusForbidden {
			t.Errorf("GET %s: %d %q, want 403", u, code, body)
		}
	}
	if _, code := socksConnect(t, s, "localhost", op); code != socksNotAllowed {
		t.Errorf("SOCKS5 localhost on a port no rule names: reply %d, want %d", code, socksNotAllowed)
	}
	if other.conns.Load() != 0 {
		t.Errorf("the loopback server on a port no rule names was reached")
	}
	if got := r.names(); len(got) != 0 {
		t.Errorf("the resolver was asked for %q; localhost names must never be looked up", got)
	}
	// The control: the same resolver is asked for another allowed name.
	fetch(c, "http://api.test:"+sp+"/")
	if got := r.names(); len(got) != 1 || got[0] != "api.test." {
		t.Errorf("the resolver was asked for %q, want [api.test.]: the tripwire is not wired", got)
	}
}

// TestLocalhostWithoutALoopbackRange: a localhost rule that no range lets
// reach the loopback is refused when the allowlist is built (moat policy
// check, moat run), naming the range to add; an allowlist a library builds
// by hand with such a rule fails closed at the request.
func TestLocalhostWithoutALoopbackRange(t *testing.T) {
	for _, e := range []policies.Egress{
		{Allow: []string{"localhost:8080"}},
		{Allow: []string{"localhost:8080"}, CIDRs: []string{"127.0.0.1/32:8081"}},
		{Allow: []string{"*.localhost"}, CIDRs: []string{"127.0.0.1/32:8080"}},
	} {
		_, err := NewAllowlist(&e)
		fes := policies.FieldErrors(err)
		if len(fes) != 1 || fes[0].Path != "egress.allow[0]" || !strings.Contains(fes[0].Reason, "--allow-cidr 127.0.0.1/32") {
			t.Errorf("allowlist %+v: %v, want egress.allow[0] pointing at --allow-cidr", e, err)
		}
	}
	srv := newCountingServer(t)
	sp := port(t, srv.Server)
	p := newProxy(t)
	r := &recordingResolver{Hosts: testNames}
	p.resolver = r
	s, err := p.Open(&Allowlist{Rules: []policies.HostRule{{Name: "localhost"}}, CIDRs: []policies.CIDRRule{{Prefix: netip.MustParsePrefix("127.0.0.1/32"), Port: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if code, body := fetch(client(s), "http://localhost:"+sp+"/"); code != http.StatusForbidden || !strings.Contains(body, "--allow-cidr 127.0.0.1/32:"+sp) {
		t.Errorf("localhost with no range for its port: %d %q, want 403 naming the range", code, body)
	}
	if srv.conns.Load() != 0 || len(r.names()) != 0 {
		t.Errorf("the refused localhost request reached the server (%d) or the resolver (%q)", srv.conns.Load(), r.names())
	}
}
