package egress

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/conformance/testenv"
	"github.com/moat-sandbox/moat/nsexec/hostpath"
	"github.com/moat-sandbox/moat/policies"
)

func addrs(s ...string) []netip.Addr {
	var out []netip.Addr
	for _, a := range s {
		out = append(out, netip.MustParseAddr(a))
	}
	return out
}

var testNames = Hosts{
	"api.test":       addrs("127.0.0.1"),
	"files.test":     addrs("127.0.0.1"),
	"x.files.test":   addrs("127.0.0.1"),
	"rebind.test":    addrs("127.0.0.2"),
	"private.test":   addrs("10.1.2.3"),
	"linklocal.test": addrs("169.254.169.254"),
	"mixed.test":     addrs("10.9.9.9", "127.0.0.1"),
}

// testPolicy allows the test names; 127.0.0.1/32 is named so the local
// servers are reachable, and nothing else of loopback is.
var testPolicy = policies.Egress{
	Allow: []string{"api.test", "*.files.test", "rebind.test", "private.test", "linklocal.test", "mixed.test", "files.test:1"},
	CIDRs: []string{"127.0.0.1/32"},
}

func newProxy(t testing.TB, opts ...Option) *Proxy {
	t.Helper()
	p, err := New(append([]Option{WithResolver(testNames)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func open(t testing.TB, p *Proxy, e policies.Egress) *Sandbox {
	t.Helper()
	al, err := NewAllowlist(&e)
	if err != nil {
		t.Fatal(err)
	}
	s, err := p.Open(al)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// client is an HTTP client whose proxy is the sandbox's socket.
func client(s *Sandbox) *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: "proxy.invalid:3128"}),
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", s.Socket())
		},
		TLSClientConfig:   &tls.Config{InsecureSkipVerify: true},
		DisableKeepAlives: true,
	}}
}

func hello(w http.ResponseWriter, r *http.Request) { fmt.Fprintf(w, "hello %s", r.Host) }

func port(t *testing.T, srv *httptest.Server) string {
	u, _ := url.Parse(srv.URL)
	return u.Port()
}

func TestAllowedNamesPassEveryProtocol(t *testing.T) {
	tlsSrv := httptest.NewTLSServer(http.HandlerFunc(hello))
	defer tlsSrv.Close()
	plain := httptest.NewServer(http.HandlerFunc(hello))
	defer plain.Close()
	p := newProxy(t)
	s := open(t, p, testPolicy)
	c := client(s)
	for _, u := range []string{
		"https://api.test:" + port(t, tlsSrv) + "/", // CONNECT
		"http://api.test:" + port(t, plain) + "/",   // absolute URI
		"https://x.files.test:" + port(t, tlsSrv) + "/",
	} {
		resp, err := c.Get(u)
		if err != nil {
			t.Fatalf("GET %s: %v", u, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.HasPrefix(string(body), "hello ") {
			t.Errorf("GET %s: %d %q", u, resp.StatusCode, body)
		}
	}
	// SOCKS5 with a host name, then plain HTTP through the tunnel.
	conn, code := socksConnect(t, s, "api.test", port(t, plain))
	if code != socksOK {
		t.Fatalf("SOCKS5 connect to an allowed name: reply %d", code)
	}
	fmt.Fprintf(conn, "GET / HTTP/1.1\r\nHost: api.test\r\nConnection: close\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("HTTP through the SOCKS5 tunnel: %v %v", resp, err)
	}
	conn.Close()
	u := s.Usage()
	if u.Connections != 4 || u.Denials != 0 || u.BytesOut == 0 || u.BytesIn == 0 {
		t.Errorf("usage %+v, want 4 connections, no denial, bytes both ways", u)
	}
}

// socksConnect does a SOCKS5 CONNECT to host:port by name through s.
func socksConnect(t *testing.T, s *Sandbox, host, port string) (net.Conn, byte) {
	t.Helper()
	c, err := net.Dial("unix", s.Socket())
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(port)
	req := []byte{5, 1, 0, 5, 1, 0, 3, byte(len(host))}
	req = append(req, host...)
	req = binary.BigEndian.AppendUint16(req, uint16(n))
	if _, err := c.Write(req); err != nil {
		t.Fatal(err)
	}
	var resp [12]byte
	if _, err := io.ReadFull(c, resp[:12]); err != nil {
		t.Fatalf("SOCKS5 reply: %v", err)
	}
	if resp[0] != 5 || resp[1] != 0 {
		t.Fatalf("SOCKS5 method reply %v", resp[:2])
	}
	return c, resp[3]
}

func TestDenialsSayWhy(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(hello))
	defer srv.Close()
	// A listener on 127.0.0.2 that must never see a connection: the
	// rebinding name resolves to it.
	var reached atomic.Int32
	rebind, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	defer rebind.Close()
	go func() {
		for {
			c, err := rebind.Accept()
			if err != nil {
				return
			}
			reached.Add(1)
			c.Close()
		}
	}()
	var logs strings.Builder
	p := newProxy(t, WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	s := open(t, p, testPolicy)
	c := client(s)
	_, rport, _ := net.SplitHostPort(rebind.Addr().String())
	sp := port(t, srv)
	cases := []struct {
		url, reason string
	}{
		{"http://unlisted.test:" + sp + "/", "not on the policy's egress allowlist"},
		{"http://files.test:" + sp + "/", "not on the policy's egress allowlist"}, // the wildcard is below it; the exact rule is port 1 only
		{"http://127.0.0.2:" + rport + "/", "raw IP address"},
		{"http://10.0.0.1/", "raw IP address"},
		{"http://[::1]:" + sp + "/", "raw IP address"},
		{"http://rebind.test:" + rport + "/", "127.0.0.2 is loopback"},
		{"http://private.test/", "10.1.2.3 is private"},
		{"http://linklocal.test/", "169.254.169.254 is link-local"},
	}
	for _, tc := range cases {
		for _, scheme := range []string{"http", "https"} { // plain, CONNECT
			u := strings.Replace(tc.url, "http:", scheme+":", 1)
			resp, err := c.Get(u)
			var body []byte
			if err == nil {
				body, _ = io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(body), tc.reason) {
					t.Errorf("GET %s: %d %q, want 403 saying %q", u, resp.StatusCode, body, tc.reason)
				}
				continue
			}
			// A refused CONNECT is an error of the client carrying the status.
			if !strings.Contains(err.Error(), "Forbidden") {
				t.Errorf("GET %s: %v, want a 403", u, err)
			}
		}
	}
	if reached.Load() != 0 {
		t.Errorf("the loopback listener behind the rebinding name was reached %d times", reached.Load())
	}
	// mixed.test resolves to a private address and an allowed one: only the
	// allowed one is used.
	resp, err := c.Get("http://mixed.test:" + sp + "/")
	if err != nil || resp.StatusCode != 200 {
		t.Errorf("a name with one allowed address: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	// SOCKS5: the reply code says "not allowed by ruleset".
	if _, code := socksConnect(t, s, "unlisted.test", sp); code != socksNotAllowed {
		t.Errorf("SOCKS5 to an unlisted name: reply %d, want %d", code, socksNotAllowed)
	}
	if _, code := socksConnect(t, s, "rebind.test", rport); code != socksNotAllowed {
		t.Errorf("SOCKS5 to a loopback-resolving name: reply %d, want %d", code, socksNotAllowed)
	}
	if _, code := socksConnect(t, s, "api.test", "1"); code != socksRefused {
		t.Errorf("SOCKS5 to an allowed name with nothing listening: reply %d, want %d", code, socksRefused)
	}
	if got := s.Usage().Denials; got != int64(2*len(cases)+2) {
		t.Errorf("denials %d, want %d", got, 2*len(cases)+2)
	}
	if !strings.Contains(logs.String(), "egress denied") || !strings.Contains(logs.String(), "unlisted.test:") {
		t.Errorf("denials not logged through the logger:\n%s", logs.String())
	}
}

func TestHostsOwnAddressesAreRefused(t *testing.T) {
	p := newProxy(t)
	p.hostAddrs = func() ([]netip.Addr, error) { return addrs("198.51.99.7"), nil }
	p.resolver = Hosts{"self.test": addrs("198.51.99.7")}
	s := open(t, p, policies.Egress{Allow: []string{"self.test"}})
	_, err := s.dial(context.Background(), "self.test", 80)
	var d *Denial
	if !errors.As(err, &d) || !strings.Contains(d.Reason, "this host's own addresses") {
		t.Errorf("dial of a name resolving to the host's own address: %v", err)
	}
}

func TestForbiddenRanges(t *testing.T) {
	for _, a := range []string{"127.0.0.1", "::1", "10.0.0.1", "172.16.5.4", "192.168.1.1", "169.254.169.254", "fe80::1",
		"fc00::1", "0.0.0.0", "::", "100.64.0.1", "224.0.0.1", "255.255.255.255", "64:ff9b::a00:1", "2002:a00:1::1", "::7f00:1", "::ffff:0:a00:1"} {
		if forbidden(netip.MustParseAddr(a), nil) == "" {
			t.Errorf("%s passes as a public destination", a)
		}
	}
	for _, a := range []string{"8.8.8.8", "2606:4700::1111", "151.101.0.223"} {
		if r := forbidden(netip.MustParseAddr(a), nil); r != "" {
			t.Errorf("%s refused: %s", a, r)
		}
	}
}

// TestFloodIsCappedPerSandbox: a sandbox that holds its cap of
// connections gets the next one closed, and another sandbox of the same
// proxy is served meanwhile.
func TestFloodIsCappedPerSandbox(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(hello))
	defer srv.Close()
	const limit = 8
	p := newProxy(t, WithMaxConns(limit))
	flooder := open(t, p, testPolicy)
	other := open(t, p, testPolicy)
	var held []net.Conn
	for range limit {
		c, code := socksConnect(t, flooder, "api.test", port(t, srv))
		if code != socksOK {
			t.Fatalf("connection within the cap refused: %d", code)
		}
		held = append(held, c)
	}
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	// Over the cap: closed without a reply.
	for range 3 * limit {
		c, err := net.Dial("unix", flooder.Socket())
		if err != nil {
			continue // the backlog is full: refused as well
		}
		c.SetDeadline(time.Now().Add(5 * time.Second))
		c.Write([]byte{5, 1, 0})
		var b [2]byte
		if n, err := io.ReadFull(c, b[:]); err == nil {
			t.Fatalf("a connection over the cap was served: %v", b[:n])
		}
		c.Close()
	}
	if d := flooder.Usage().Denials; d == 0 {
		t.Errorf("no denial counted for the connections over the cap")
	}
	resp, err := client(other).Get("http://api.test:" + port(t, srv) + "/")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("the other sandbox was starved: %v %v", resp, err)
	}
	resp.Body.Close()
}

// peerClient connects to a sandbox's socket as another host user (a
// python3 child as uid 65534), sends argv[2], and prints what came back.
// argv[1] is the unix socket's path, or "tcp:PORT" for a loopback port
// (OpenLoopback).
const peerClient = `import socket, sys
a = sys.argv[1]
if a.startswith("tcp:"):
    s = socket.create_connection(("127.0.0.1", int(a[4:])), timeout=10)
else:
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(10)
    s.connect(a)
got = b""
try:
    s.sendall(sys.argv[2].encode())
    while True:
        d = s.recv(4096)
        if not d:
            break
        got += d
except OSError:
    pass
sys.stdout.write(got.decode(errors="replace"))
`

// TestOnlyTheSandboxMayConnect: a user of the host who learns a sandbox's
// socket name (/proc/net/unix lists it) and connects is refused without a
// reply and counted as a denial, instead of reaching the network with the
// sandbox's allowlist from the proxy's uid. Once the sandbox's owner admits
// that uid (a root-run sandbox's host id), the same client is served.
func TestOnlyTheSandboxMayConnect(t *testing.T) {
	testenv.RequireRoot(t)
	// Debian's, which uid 65534 may run (a PATH's python3 may be a
	// user's own, in a home it cannot enter).
	const python = "/usr/bin/python3"
	if _, err := os.Stat(python); err != nil {
		testenv.Skipf(t, "no %s to connect as another user with: install python3", python)
	}
	srv := httptest.NewServer(http.HandlerFunc(hello))
	defer srv.Close()
	p := newProxy(t)
	s := open(t, p, testPolicy)
	host := "api.test:" + port(t, srv)
	ask := func() string {
		t.Helper()
		cmd := exec.Command(python, "-c", peerClient, s.Socket(),
			"GET http://"+host+"/ HTTP/1.1\r\nHost: "+host+"\r\nConnection: close\r\n\r\n")
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("the client as uid 65534: %v (the socket %s must be reachable by any user)", err, s.Socket())
		}
		return string(out)
	}
	if out := ask(); out != "" {
		t.Fatalf("a host user's connection was served: %q", out)
	}
	if u := s.Usage(); u.Denials != 1 || u.Connections != 0 {
		t.Fatalf("usage after a stranger's connection: %+v; want one denial and no connection", u)
	}
	s.Admit(65534, 1)
	if out := ask(); !strings.Contains(out, "hello "+host) {
		t.Fatalf("an admitted uid's request: %q; want the server's greeting", out)
	}
}

// TestCloseEndsTheSandboxsConnections: a closed sandbox's socket is gone and
// its open tunnels are cut.
func TestCloseEndsTheSandboxsConnections(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(hello))
	defer srv.Close()
	p := newProxy(t)
	s := open(t, p, testPolicy)
	c, code := socksConnect(t, s, "api.test", port(t, srv))
	if code != socksOK {
		t.Fatal(code)
	}
	done := make(chan error, 1)
	go func() { _, err := c.Read(make([]byte, 1)); done <- err }()
	s.Close()
	select {
	case err := <-done:
		if err == nil {
			t.Error("read after Close returned data")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the tunnel outlived its sandbox's Close")
	}
	if _, err := net.Dial("unix", s.Socket()); err == nil {
		t.Error("the socket still accepts after Close")
	}
}

func TestSocketDirectoryMustBePrivate(t *testing.T) {
	dir := t.TempDir()
	if err := osChmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := New(WithDir(dir)); err == nil || !strings.Contains(err.Error(), "0711") {
		t.Errorf("a socket directory others can enter: %v", err)
	}
}

func osChmod(p string, m os.FileMode) error { return os.Chmod(p, m) }

// TestSocketDirectoryMustBeOurs: a 0711 directory of another user (who
// could list the sockets or swap one) is refused.
func TestSocketDirectoryMustBeOurs(t *testing.T) {
	testenv.RequireRoot(t) // to give the directory to another user
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if _, err := New(WithDir(dir)); err == nil || !strings.Contains(err.Error(), "owned by this process's user") {
		t.Errorf("a socket directory of another user: %v", err)
	}
}

// TestStaleSocketDirectoriesAreSwept: a killed proxy's directory (its lock
// free) goes at the next New; a live proxy's and one being made stay.
func TestStaleSocketDirectoriesAreSwept(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	live, err := New()
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	stale := filepath.Join(tmp, dirPrefix+"stale")
	os.Mkdir(stale, 0o711)
	os.WriteFile(filepath.Join(stale, lockName), nil, 0o600)
	os.WriteFile(filepath.Join(stale, "dead.sock"), nil, 0o600)
	making := filepath.Join(tmp, dirPrefix+"making")
	os.Mkdir(making, 0o711)
	// One whose maker died before the lock, an hour ago.
	orphan := filepath.Join(tmp, dirPrefix+"orphan")
	os.Mkdir(orphan, 0o711)
	old := time.Now().Add(-time.Hour)
	os.Chtimes(orphan, old, old)
	// A symlink named like one is never followed.
	victim := t.TempDir()
	os.WriteFile(filepath.Join(victim, lockName), nil, 0o600)
	os.Symlink(victim, filepath.Join(tmp, dirPrefix+"link"))
	p, err := New()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for _, d := range []string{stale, orphan} {
		if _, err := os.Stat(d); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("the stale directory %s is still there: %v", d, err)
		}
	}
	for _, d := range []string{live.Dir(), making, victim} {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("%s was removed: %v", d, err)
		}
	}
	p.Close()
	if _, err := os.Stat(p.Dir()); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Close left its directory: %v", err)
	}
}

// TestConcurrentProxiesKeepTheirDirectories: proxies made and closed at
// once, each sweeping, never remove one another's directory.
func TestConcurrentProxiesKeepTheirDirectories(t *testing.T) {
	tmp, err := os.MkdirTemp("", "e") // short: socket paths have a limit
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	t.Setenv("TMPDIR", tmp)
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 8 {
				p, err := New()
				if err != nil {
					errs <- err
					return
				}
				s, err := p.Open(&Allowlist{})
				if err != nil {
					errs <- err
				} else if _, err := os.Stat(s.Socket()); err != nil {
					errs <- fmt.Errorf("a live proxy's socket is gone: %w", err)
				}
				p.Close()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestSocketPathTooLong(t *testing.T) {
	dir := filepath.Join(t.TempDir(), strings.Repeat("d", 80))
	os.Mkdir(dir, 0o700)
	p, err := New(WithDir(dir))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := p.Open(&Allowlist{}); err == nil || !strings.Contains(err.Error(), "shorter TMPDIR") {
		t.Errorf("a socket path over the limit: %v", err)
	}
}

// TestMalformedRequestsAreAnswered: what the proxy does not serve gets the
// protocol's own refusal, never a silent hang or a connection out.
func TestMalformedRequestsAreAnswered(t *testing.T) {
	p := newProxy(t)
	s := open(t, p, testPolicy)
	exchange := func(send []byte, n int) []byte {
		t.Helper()
		c, err := net.Dial("unix", s.Socket())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		c.Write(send)
		got := make([]byte, n)
		k, _ := io.ReadFull(c, got)
		return got[:k]
	}
	for _, tc := range []struct {
		name string
		send string
		want string
	}{
		{"origin-form request", "GET / HTTP/1.1\r\nHost: api.test\r\n\r\n", "HTTP/1.1 400"},
		{"https in an absolute URI", "GET https://api.test/ HTTP/1.1\r\nHost: api.test\r\n\r\n", "HTTP/1.1 400"},
		{"CONNECT without a port", "CONNECT api.test HTTP/1.1\r\nHost: api.test\r\n\r\n", "HTTP/1.1 400"},
		{"not HTTP", "\x16\x03\x01 hello\r\n\r\n", "HTTP/1.1 400"},
	} {
		if got := exchange([]byte(tc.send), 12); string(got) != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
	socks := []struct {
		name string
		send []byte
		want []byte
	}{
		{"no acceptable method (username/password only)", []byte{5, 1, 2}, []byte{5, 0xff}},
		{"BIND", []byte{5, 1, 0, 5, 2, 0, 1, 127, 0, 0, 1, 0, 80}, []byte{5, 0, 5, socksCmdUnsupported}},
		{"UDP ASSOCIATE", []byte{5, 1, 0, 5, 3, 0, 1, 127, 0, 0, 1, 0, 80}, []byte{5, 0, 5, socksCmdUnsupported}},
		{"unknown address type", []byte{5, 1, 0, 5, 1, 0, 9}, []byte{5, 0, 5, socksAtypUnsupported}},
		{"raw IPv4 outside the ranges", []byte{5, 1, 0, 5, 1, 0, 1, 10, 0, 0, 1, 0, 80}, []byte{5, 0, 5, socksNotAllowed}},
		{"a NUL before an allowed suffix", append(append([]byte{5, 1, 0, 5, 1, 0, 3, 20}, "evil.com\x00.files.test"...), 0, 80), []byte{5, 0, 5, socksNotAllowed}},
	}
	for _, tc := range socks {
		if got := exchange(tc.send, len(tc.want)); string(got) != string(tc.want) {
			t.Errorf("SOCKS5 %s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestHostAddressesUnknownFailsClosed: when the host's own addresses
// cannot be listed, a name is refused rather than let through unchecked.
func TestHostAddressesUnknownFailsClosed(t *testing.T) {
	p := newProxy(t)
	p.hostAddrs = func() ([]netip.Addr, error) { return nil, errors.New("netlink: too many open files") }
	p.resolver = Hosts{"pub.test": addrs("198.51.99.8")}
	s := open(t, p, policies.Egress{Allow: []string{"pub.test"}})
	_, err := s.dial(context.Background(), "pub.test", 80)
	var d *Denial
	if !errors.As(err, &d) || !strings.Contains(d.Reason, "cannot be listed") {
		t.Errorf("dial with the host's addresses unknown: %v", err)
	}
}

// askedResolver records the names it is asked for.
type askedResolver struct{ asked []string }

func (r *askedResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	r.asked = append(r.asked, host)
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// TestResolvesTheRootedName: the name checked against the allowlist is
// the one resolved, never one of resolv.conf's search domains appended.
func TestResolvesTheRootedName(t *testing.T) {
	p := newProxy(t)
	r := &askedResolver{}
	p.resolver = r
	s := open(t, p, policies.Egress{Allow: []string{"*.example.com"}})
	s.dial(context.Background(), "x.example.com", 443)
	if len(r.asked) != 1 || r.asked[0] != "x.example.com." {
		t.Errorf("resolver asked %q, want [x.example.com.]", r.asked)
	}
}

// TestSocketDirectoryThroughAPlantedLink (issue 28 item 7): a socket
// directory of the caller's, reached through a link someone else could
// have planted (in a directory anyone may write), is refused naming the
// link; through the caller's own link in its own directory it is used.
func TestSocketDirectoryThroughAPlantedLink(t *testing.T) {
	top := t.TempDir()
	dir := filepath.Join(top, "socks")
	if err := os.Mkdir(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	shared := filepath.Join(t.TempDir(), "shared")
	os.Mkdir(shared, 0o777)
	os.Chmod(shared, 0o777)
	link := filepath.Join(shared, "run")
	if err := os.Symlink(top, link); err != nil {
		t.Fatal(err)
	}
	var le *hostpath.LinkError
	if p, err := New(WithDir(filepath.Join(link, "socks"))); !errors.As(err, &le) || le.Link != link {
		if err == nil {
			p.Close()
		}
		t.Fatalf("through a planted link: %v, want a *hostpath.LinkError naming %s", err, link)
	}
	mine := filepath.Join(t.TempDir(), "run")
	os.Symlink(top, mine)
	p, err := New(WithDir(filepath.Join(mine, "socks")))
	if err != nil {
		t.Fatalf("through the caller's own link: %v", err)
	}
	p.Close()
}
