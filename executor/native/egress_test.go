package native_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/conformance"
	"github.com/moat-sandbox/moat/conformance/testenv"
	"github.com/moat-sandbox/moat/executor"
	"github.com/moat-sandbox/moat/executor/egress"
	"github.com/moat-sandbox/moat/executor/native"
	"github.com/moat-sandbox/moat/nsexec"
	"github.com/moat-sandbox/moat/policies"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// names lead the allowed names to servers on the host's loopback: there is
// no internet here.
var names = egress.Hosts{"api.test": {netip.MustParseAddr("127.0.0.1")}, "rebind.test": {netip.MustParseAddr("127.0.0.2")},
	"private.test": {netip.MustParseAddr("10.1.2.3")}}

// egressPolicy is the default policy with an allowlist; 127.0.0.1/32 is
// named so the local servers are reachable at all.
func egressPolicy(t *testing.T) *policies.Policy {
	pol, err := policies.Builtin("default")
	if err != nil {
		t.Fatal(err)
	}
	pol.Egress = &policies.Egress{Allow: []string{"api.test", "rebind.test", "private.test"}, CIDRs: []string{"127.0.0.1/32"}}
	return pol
}

// servers are the test's destinations: HTTPS with a certificate for
// api.test from a CA the sandbox gets (so the tool verifies it: the tunnel
// is end to end), and plain HTTP.
type servers struct {
	tls, plain *httptest.Server
	caDir      string
}

func (s *servers) port(srv *httptest.Server) string {
	u, _ := url.Parse(srv.URL)
	return u.Port()
}

func startServers(t *testing.T) *servers {
	t.Helper()
	hello := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintf(w, "hello from %s", r.Host) })
	tlsSrv, caPEM := testenv.TLSServer(t, hello, "api.test")
	s := &servers{tls: tlsSrv, plain: httptest.NewServer(hello)}
	t.Cleanup(s.plain.Close)
	// A directory the sandbox's host id can read (root's sandboxes run as
	// another id).
	dir, err := os.MkdirTemp("", "moat-egress-ca-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	if err := os.WriteFile(filepath.Join(dir, "ca.pem"), caPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	s.caDir = dir
	return s
}

// recordUsage is a WithEgressUsage option and what it last got.
func recordUsage() (native.Option, func() egress.Usage) {
	var mu sync.Mutex
	var last egress.Usage
	return native.WithEgressUsage(func(_ *executor.Request, u egress.Usage) {
			mu.Lock()
			last = u
			mu.Unlock()
		}), func() egress.Usage {
			mu.Lock()
			defer mu.Unlock()
			return last
		}
}

// egressProvider is a provider of pol on a shared proxy.
func egressProvider(t *testing.T, proxy *egress.Proxy, pol *policies.Policy, extra ...native.Option) *native.Provider {
	t.Helper()
	p, err := native.New(append([]native.Option{native.WithPolicy(pol), native.WithoutCgroups(), native.WithTimeout(30 * time.Second),
		native.WithEgressProxy(proxy)}, extra...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func newTestProxy(t *testing.T, opts ...egress.Option) *egress.Proxy {
	t.Helper()
	proxy, err := egress.New(append([]egress.Option{egress.WithResolver(names)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	return proxy
}

// shellIn runs script under p with the CA bound at /ca and returns its
// combined output.
func shellIn(t *testing.T, p *native.Provider, caDir, script string) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	done := make(chan struct{})
	go func() { bufio.NewReader(r).WriteTo(&out); close(done) }()
	_, err = p.Run(context.Background(), &native.Command{
		Args: []string{"/bin/sh", "-c", script}, Env: []string{"PATH=/usr/bin:/bin", "HOME=/work", "HTTPS_PROXY=http://evil.invalid:1"},
		Stdout: w, Stderr: w,
	})
	w.Close()
	<-done
	r.Close()
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	return out.String()
}

// TestEgressThroughTheProxyOnly: curl and python's urllib reach the allowed
// name over TLS (verified against the test CA) and plain HTTP through the
// proxy environment; every other way out fails, each with its own error.
func TestEgressThroughTheProxyOnly(t *testing.T) { asRootAndNobody(t, testEgressThroughTheProxyOnly) }

func testEgressThroughTheProxyOnly(t *testing.T) {
	srv := startServers(t)
	proxy := newTestProxy(t)
	record, usageOf := recordUsage()
	p := egressProvider(t, proxy, egressPolicy(t), record, native.WithBinds(specs.Mount{Source: srv.caDir, Destination: "/ca", Options: []string{"ro"}}))
	other, err := proxy.Open(&egress.Allowlist{})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	tlsPort, plainPort := srv.port(srv.tls), srv.port(srv.plain)
	steps := []struct{ name, cmd, want string }{
		{"curl https", "curl -sS --cacert /ca/ca.pem https://api.test:" + tlsPort + "/", "hello from api.test:" + tlsPort},
		{"curl http", "curl -sS http://api.test:" + plainPort + "/", "hello from api.test:" + plainPort},
		{"urllib https", `python3 -c 'import ssl,urllib.request as u; print(u.urlopen("https://api.test:` + tlsPort + `/", context=ssl.create_default_context(cafile="/ca/ca.pem")).read().decode())'`, "hello from api.test:" + tlsPort},
		{"urllib http", `python3 -c 'import urllib.request as u; print(u.urlopen("http://api.test:` + plainPort + `/").read().decode())'`, "hello from api.test:" + plainPort},
		{"curl socks5h", "curl -sS --proxy socks5h://127.0.0.1:3128 http://api.test:" + plainPort + "/", "hello from api.test:" + plainPort},
		{"unlisted name, http", "curl -sS http://unlisted.test:" + plainPort + "/", "unlisted.test is not on the policy's egress allowlist"},
		{"unlisted name, https", "curl -sS https://unlisted.test:" + tlsPort + "/", "CONNECT tunnel failed, response 403"},
		{"unlisted name, urllib", `python3 -c 'import urllib.request as u; u.urlopen("http://unlisted.test:` + plainPort + `/")' 2>&1 | tail -1`, "HTTP Error 403: Forbidden"},
		{"raw IP", "curl -sS http://10.0.0.1/", "a raw IP address is allowed only inside the policy's egress.cidrs"},
		{"raw loopback IP", "curl -sS --noproxy '' -x http://127.0.0.1:3128 http://127.0.0.2:" + plainPort + "/", "a raw IP address is allowed only inside"},
		{"name resolving to loopback", "curl -sS http://rebind.test:" + plainPort + "/", "127.0.0.2 is loopback"},
		{"name resolving to a private address", "curl -sS http://private.test/", "10.1.2.3 is private"},
		{"socks5h unlisted", "curl -sS --proxy socks5h://127.0.0.1:3128 http://unlisted.test/", "SOCKS5 connection to unlisted.test. (2)"},
		{"direct to the host's loopback server", "curl -sS --noproxy '*' http://127.0.0.1:" + plainPort + "/", "Failed to connect to 127.0.0.1"},
		{"direct by name", "curl -sS --noproxy '*' http://api.test:" + plainPort + "/", "Could not resolve host: api.test"},
		{"direct to the host's address", `python3 -c 'import socket; socket.create_connection(("192.0.2.2", 80), 3)' 2>&1 | tail -1`, "Network is unreachable"},
		{"another sandbox's socket", `python3 -c 'import socket; s=socket.socket(socket.AF_UNIX); s.connect("` + other.Socket() + `")' 2>&1 | tail -1`, "No such file or directory"},
	}
	var script strings.Builder
	for i, s := range steps {
		fmt.Fprintf(&script, "echo '<<%d>>'; %s; echo\n", i, s.cmd)
	}
	out := shellIn(t, p, srv.caDir, script.String())
	for i, s := range steps {
		part := out[strings.Index(out, fmt.Sprintf("<<%d>>", i)):]
		if j := strings.Index(part, fmt.Sprintf("<<%d>>", i+1)); j >= 0 {
			part = part[:j]
		}
		if !strings.Contains(part, s.want) {
			t.Errorf("%s: %q\ngot: %s", s.name, s.cmd, part)
		}
	}
	if usage := usageOf(); usage.Connections != 5 || usage.Denials != 8 || usage.BytesIn == 0 || usage.BytesOut == 0 {
		t.Errorf("usage %+v, want 5 connections, 8 denials, bytes both ways", usageOf())
	}
	if other.Usage() != (egress.Usage{}) {
		t.Errorf("the other sandbox's socket was used: %+v", other.Usage())
	}
}

// TestEgressFloodIsCappedPerSandbox: a tool that holds far more connections
// to the proxy than its cap gets the excess closed, and a sandbox of the
// same proxy beside it is served meanwhile.
func TestEgressFloodIsCappedPerSandbox(t *testing.T) {
	asRootAndNobody(t, testEgressFloodIsCappedPerSandbox)
}

func testEgressFloodIsCappedPerSandbox(t *testing.T) {
	srv := startServers(t)
	const limit = 16
	proxy := newTestProxy(t, egress.WithMaxConns(limit))
	record, usageOf := recordUsage()
	flooder := egressProvider(t, proxy, egressPolicy(t), record)
	neighbour := egressProvider(t, proxy, egressPolicy(t))
	// The flooder opens 400 tunnels and holds them until its stdin closes.
	flood := `import socket, sys
held = []
for i in range(400):
    try:
        s = socket.create_connection(("127.0.0.1", 3128), 5)
        s.sendall(b"CONNECT api.test:` + srv.port(srv.plain) + ` HTTP/1.1\r\nHost: api.test\r\n\r\n")
        held.append(s)
    except OSError:
        pass
ok = 0
for s in held:
    s.settimeout(5)
    try:
        if s.recv(64).startswith(b"HTTP/1.1 200"):
            ok += 1
    except OSError:
        pass
print("tunnels", ok, flush=True)
sys.stdin.read()
`
	inR, inW, _ := os.Pipe()
	outR, outW, _ := os.Pipe()
	done := make(chan error, 1)
	go func() {
		_, err := flooder.Run(context.Background(), &native.Command{Args: []string{"python3", "-c", flood},
			Env: []string{"PATH=/usr/bin:/bin"}, Stdin: inR, Stdout: outW, Stderr: outW})
		outW.Close()
		inR.Close()
		done <- err
	}()
	line, err := bufio.NewReader(outR).ReadString('\n')
	if err != nil || line != fmt.Sprintf("tunnels %d\n", limit) {
		if err != nil {
			err = fmt.Errorf("%v; the run: %v", err, <-done)
		}
		t.Fatalf("the flooder says %q (%v), want exactly the cap of %d tunnels", line, err, limit)
	}
	// While the flooder holds its cap, the neighbour gets through.
	out := shellIn(t, neighbour, srv.caDir, "curl -sS http://api.test:"+srv.port(srv.plain)+"/")
	if !strings.Contains(out, "hello from api.test") {
		t.Errorf("the neighbour was starved: %s", out)
	}
	inW.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	outR.Close()
	if flooded := usageOf(); flooded.Connections != limit || flooded.Denials < 400-limit-50 {
		t.Errorf("the flooder's usage %+v, want %d connections and the rest denied", usageOf(), limit)
	}
}

// TestEgressInThePosture: the posture names the egress network and the
// policy's allowlist, so loosening it moves the fingerprint.
func TestEgressInThePosture(t *testing.T) {
	proxy := newTestProxy(t)
	pol := egressPolicy(t)
	p := egressProvider(t, proxy, pol)
	post := p.Posture()
	n := post.Isolation.Native
	if post.Isolation.Network != "egress" || n == nil || n.Egress == nil || strings.Join(n.Egress.Allow, " ") != "api.test rebind.test private.test" ||
		strings.Join(n.Egress.CIDRs, " ") != "127.0.0.1/32" {
		t.Fatalf("posture %+v, egress %+v", post.Isolation, n.Egress)
	}
	wider := egressPolicy(t)
	wider.Egress.Allow = append(wider.Egress.Allow, "*.example.com")
	if executor.Fingerprint(egressProvider(t, proxy, wider).Posture()) == executor.Fingerprint(post) {
		t.Error("a wider allowlist left the fingerprint as it was")
	}
	if err := executor.StrictFloor(post); err == nil {
		t.Error("the strict floor accepted a posture with egress")
	}
	// Ranges with ports, and a localhost rule, are attested as written,
	// and a port moves the fingerprint like any other widening.
	ported := egressPolicy(t)
	ported.Egress = &policies.Egress{Allow: []string{"localhost:8080", "api.test"}, CIDRs: []string{"127.0.0.1:8080", "[::1]/128:8080"}}
	pp := egressProvider(t, proxy, ported).Posture()
	if e := pp.Isolation.Native.Egress; strings.Join(e.Allow, " ") != "localhost:8080 api.test" || strings.Join(e.CIDRs, " ") != "127.0.0.1:8080 [::1]/128:8080" {
		t.Errorf("posture of ranges with ports: %+v, want them as the policy writes them", e)
	}
	other := egressPolicy(t)
	other.Egress = &policies.Egress{Allow: ported.Egress.Allow, CIDRs: []string{"127.0.0.1:8081", "[::1]/128:8080"}}
	if executor.Fingerprint(egressProvider(t, proxy, other).Posture()) == executor.Fingerprint(pp) {
		t.Error("another port in a range left the fingerprint as it was")
	}
}

// TestEgressConformance: a policy with an egress section keeps every
// isolation of the kit, the network's included: no route out, only lo,
// neither the host's loopback listener nor its abstract socket reachable.
func TestEgressConformance(t *testing.T) {
	asRootAndNobody(t, func(t *testing.T) {
		proxy := newTestProxy(t)
		conformance.Run(t, policyProvider("default", native.WithPolicy(egressPolicy(t)), native.WithEgressProxy(proxy)), everything)
	})
}

// TestEgressStartsCold: a pooled sandbox is prepared before its dispatch
// is known, so with egress the pool is not used, and the run still gets
// its own socket.
func TestEgressStartsCold(t *testing.T) {
	srv := startServers(t)
	p := egressProvider(t, newTestProxy(t), egressPolicy(t), native.WithPool(2))
	if out := shellIn(t, p, srv.caDir, "curl -sS http://api.test:"+srv.port(srv.plain)+"/"); !strings.Contains(out, "hello from api.test") {
		t.Errorf("through a provider asked for a pool: %s", out)
	}
	if s := p.PoolStats(); s != (native.PoolStats{}) {
		t.Errorf("pool stats %+v, want no pool", s)
	}
}

// TestEgressNeedsInetSockets: a policy whose filter refuses AF_INET
// sockets (strict) could never reach its proxy: refused with the reason.
func TestEgressNeedsInetSockets(t *testing.T) {
	pol, err := policies.Builtin("strict")
	if err != nil {
		t.Fatal(err)
	}
	pol.Egress = &policies.Egress{Allow: []string{"api.test"}}
	_, err = native.New(native.WithPolicy(pol), native.WithoutCgroups(), native.WithEgressProxy(newTestProxy(t)))
	if executor.CodeOf(err) != executor.CodeConfig || !strings.Contains(err.Error(), "refuses socket(AF_INET)") {
		t.Errorf("egress under the strict filter: %v", err)
	}
	for _, name := range []string{"default", "python", "node", "shell"} {
		pol, _ := policies.Builtin(name)
		pol.Egress = &policies.Egress{Allow: []string{"api.test"}}
		p, err := native.New(native.WithPolicy(pol), native.WithoutCgroups(), native.WithEgressProxy(newTestProxy(t)))
		if err != nil {
			t.Errorf("egress under %s: %v", name, err)
			continue
		}
		p.Close()
	}
}

// TestFailedNewStopsItsOwnProxy: a provider that started its own proxy
// and then failed (here a negative pool size) leaves no socket directory.
func TestFailedNewStopsItsOwnProxy(t *testing.T) {
	dirs := func() []string {
		m, err := filepath.Glob(filepath.Join(os.TempDir(), "moat-egress-*"))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	before := dirs()
	if _, err := native.New(native.WithPolicy(egressPolicy(t)), native.WithoutCgroups(), native.WithPool(-1)); err == nil {
		t.Fatal("New with a negative pool size succeeded")
	}
	if after := dirs(); len(after) != len(before) {
		t.Errorf("proxy directories before %v, after a failed New %v", before, after)
	}
}

// TestEgressAdmitsOnlyTheSandboxsOwnID: as root each sandbox runs as a host
// id of its own from the range, and its egress socket admits that id alone
// (besides the proxy's own user): a process of any other id of the range,
// another sandbox's or one escaped from it, connecting to the socket, is
// closed without a byte and counted as a denial, while the sandbox's own id
// is served.
func TestEgressAdmitsOnlyTheSandboxsOwnID(t *testing.T) {
	testenv.RequireRoot(t)
	if !nsexec.IsHostRoot() {
		testenv.Skipf(t, "root here is not host root: each sandbox maps this process's own id")
	}
	srv := startServers(t)
	proxy := newTestProxy(t)
	record, usageOf := recordUsage()
	p := egressProvider(t, proxy, egressPolicy(t), record)
	marker := fmt.Sprintf("moat-admit-%d", time.Now().UnixNano())
	connect := "CONNECT api.test:" + srv.port(srv.plain) + " HTTP/1.1\r\nHost: api.test\r\n\r\n"
	tool := `import socket, sys
marker = "` + marker + `"
print("ready", flush=True)
sys.stdin.readline()
s = socket.create_connection(("127.0.0.1", 3128), 5)
s.sendall(b"` + strings.ReplaceAll(strings.ReplaceAll(connect, "\r", `\r`), "\n", `\n`) + `")
print(s.recv(64).split(b"\r\n")[0].decode(), flush=True)
`
	inR, inW, _ := os.Pipe()
	outR, outW, _ := os.Pipe()
	done := make(chan error, 1)
	go func() {
		_, err := p.Run(context.Background(), &native.Command{Args: []string{"python3", "-c", tool},
			Env: []string{"PATH=/usr/bin:/bin"}, Stdin: inR, Stdout: outW, Stderr: outW})
		outW.Close()
		inR.Close()
		done <- err
	}()
	defer inW.Close()
	out := bufio.NewReader(outR)
	if line, err := out.ReadString('\n'); line != "ready\n" {
		t.Fatalf("the tool says %q (%v; run: %v)", line, err, <-done)
	}
	sock := onlySocket(t, proxy.Dir())
	own := hostUIDOf(t, marker)
	if own < nsexec.HostIDFirst || own >= nsexec.HostIDFirst+nsexec.HostIDCount {
		t.Fatalf("the sandbox runs as host uid %d, outside the range", own)
	}
	for _, uid := range []uint32{own + 1, nsexec.HostIDFirst + nsexec.HostIDCount - 1, own - 1} {
		if uid == own || uid < nsexec.HostIDFirst {
			continue
		}
		if got := connectAs(t, uid, sock, connect); got != "" {
			t.Errorf("host uid %d, another of the range, was served by the sandbox's socket: %q", uid, got)
		}
	}
	if got := connectAs(t, own, sock, connect); !strings.HasPrefix(got, "HTTP/1.1 200") {
		t.Errorf("the sandbox's own host uid %d was not served: %q", own, got)
	}
	fmt.Fprintln(inW)
	if line, _ := out.ReadString('\n'); line != "HTTP/1.1 200 Connection established\n" {
		t.Errorf("the tool's own tunnel: %q", line)
	}
	inW.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if u := usageOf(); u.Denials < 1 || u.Connections != 2 {
		t.Errorf("usage %+v: want the foreign peers denied and two tunnels (the probe's and the tool's)", u)
	}
}

// onlySocket is the one socket in dir.
func onlySocket(t *testing.T, dir string) string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var socks []string
	for _, e := range ents {
		if e.Type()&os.ModeSocket != 0 {
			socks = append(socks, filepath.Join(dir, e.Name()))
		}
	}
	if len(socks) != 1 {
		t.Fatalf("sockets in %s: %v, want one", dir, socks)
	}
	return socks[0]
}

// hostUIDOf is the host uid of the process whose command line holds marker.
func hostUIDOf(t *testing.T, marker string) uint32 {
	t.Helper()
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		cmd, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !strings.Contains(string(cmd), marker) {
			continue
		}
		st, err := os.ReadFile(filepath.Join("/proc", e.Name(), "status"))
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(st), "\n") {
			if f := strings.Fields(l); len(f) > 2 && f[0] == "Uid:" {
				uid, err := strconv.ParseUint(f[2], 10, 32)
				if err == nil {
					return uint32(uid)
				}
			}
		}
	}
	t.Fatalf("no process holds %q", marker)
	return 0
}

// connectAs connects to the unix socket at path from a thread whose
// effective uid is uid (the kernel records the connecting thread's
// credentials for SO_PEERCRED, unix(7)), sends req and returns what came
// back within two seconds ("" when the peer closed without a byte). The
// thread is never given back to the runtime: its goroutine ends locked,
// so the thread exits.
func connectAs(t *testing.T, uid uint32, path, req string) string {
	t.Helper()
	type result struct {
		got string
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		// Only this thread: a raw setresuid, not syscall.Setresuid, which
		// changes every thread of the process.
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, ^uintptr(0), uintptr(uid), ^uintptr(0)); e != 0 {
			ch <- result{err: fmt.Errorf("setresuid: %w", e)}
			return
		}
		fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			ch <- result{err: err}
			return
		}
		defer unix.Close(fd)
		if err := unix.Connect(fd, &unix.SockaddrUnix{Name: path}); err != nil {
			ch <- result{err: fmt.Errorf("connect as uid %d: %w", uid, err)}
			return
		}
		unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 2})
		if _, err := unix.Write(fd, []byte(req)); err != nil {
			ch <- result{} // closed before the request: refused
			return
		}
		buf := make([]byte, 64)
		n, err := unix.Read(fd, buf)
		if n <= 0 {
			if err == unix.EAGAIN {
				err = errors.New("no answer and not closed within 2 s")
			} else {
				err = nil
			}
			ch <- result{err: err}
			return
		}
		ch <- result{got: string(buf[:n])}
	}()
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	return r.got
}
