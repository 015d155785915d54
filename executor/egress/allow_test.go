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
