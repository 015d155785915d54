package main

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/moat-sandbox/moat/conformance/testenv"
	"github.com/moat-sandbox/moat/executor/egress"
)

// egressNamesVar maps host names for the egress proxy of the CLI copy
// ("api.test=127.0.0.1,b.test=127.0.0.1"): there is no internet here, so
// the tests' names lead to servers on the host's loopback.
const egressNamesVar = "MOAT_TEST_EGRESS_NAMES"

func init() {
	if v := os.Getenv(egressNamesVar); v != "" {
		hosts := egress.Hosts{}
		for _, kv := range strings.Split(v, ",") {
			k, a, _ := strings.Cut(kv, "=")
			hosts[k] = []netip.Addr{netip.MustParseAddr(a)}
		}
		egressResolver = hosts
	}
}

// TestRunAllowHost: `moat run --allow-host NAME -- curl https://NAME/`
// reaches a local TLS server through the proxy, verified end to end; an
// unlisted name is refused with the proxy's reason, which moat's stderr
// repeats when warnings are asked for; a bad flag is a usage error naming the entry.
func TestRunAllowHost(t *testing.T) {
	bothIdentities(t)
	hello := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintf(w, "hello from %s", r.Host) })
	srv, caPEM := testenv.TLSServer(t, hello, "api.test", "other.test")
	u, _ := url.Parse(srv.URL)
	caDir := moatDirFor(t)
	if err := os.WriteFile(filepath.Join(caDir, "ca.pem"), caPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) result {
		t.Helper()
		cmd := exec.Command(moatBin(t), args...)
		cmd.Dir = os.TempDir()
		cmd.Env = append(os.Environ(), egressNamesVar+"=api.test=127.0.0.1,other.test=127.0.0.1")
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		return exitResult(t, cmd.Run(), args, &out, &errb)
	}
	curl := func(name string) []string {
		return []string{"--bind", caDir + ":/ca", "--", "curl", "-sS", "--cacert", "/ca/ca.pem", "https://" + name + ":" + u.Port() + "/"}
	}
	allow := []string{"run", "--log-format", "human", "--allow-host", "api.test", "--allow-cidr", "127.0.0.1/32"}
	r := run(append(allow, curl("api.test")...)...)
	if r.code != 0 || r.stdout != "hello from api.test:"+u.Port() {
		t.Errorf("allowed name: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	r = run(append(allow, curl("other.test")...)...)
	if r.code != 56 || !strings.Contains(r.stderr, "CONNECT tunnel failed, response 403") ||
		!strings.Contains(r.stderr, "egress denied: other.test:"+u.Port()+": other.test is not on the policy's egress allowlist") {
		t.Errorf("unlisted name: exit %d, stderr %q", r.code, r.stderr)
	}
	// The loopback server is the host's own address: without the range
	// named, the proxy refuses the name that resolves to it.
	r = run(append([]string{"run", "--log-format", "human", "--allow-host", "api.test"}, curl("api.test")...)...)
	if r.code != 56 || !strings.Contains(r.stderr, "127.0.0.1 is loopback") {
		t.Errorf("name resolving to loopback: exit %d, stderr %q", r.code, r.stderr)
	}
	// Without --allow-host there is no proxy and no name resolves.
	r = run(append([]string{"run"}, curl("api.test")...)...)
	if r.code != 6 || !strings.Contains(r.stderr, "Could not resolve host: api.test") {
		t.Errorf("no egress: exit %d, stderr %q", r.code, r.stderr)
	}
	r = run("run", "--allow-host", "a.*.test", "--allow-host", "b.test:70000", "--", "/bin/true")
	if r.code != exitUsage || !strings.Contains(r.stderr, "egress.allow[0]") || !strings.Contains(r.stderr, "egress.allow[1]") {
		t.Errorf("bad --allow-host: exit %d, stderr %q", r.code, r.stderr)
	}
}

// TestRunAllowCIDRPortAndLocalhost: `--allow-cidr 127.0.0.1/32:PORT`
// opens that one port of the host's loopback, and `--allow-host
// localhost:PORT` reaches it without a lookup (no test resolver knows
// localhost here); the loopback server on another port is refused and
// never reached, by name or as a raw address; a localhost rule without a
// range for it, and a range with a port in a wrong spelling, are usage
// errors naming the entry and its fix.
func TestRunAllowCIDRPortAndLocalhost(t *testing.T) {
	bothIdentities(t)
	hello := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintf(w, "hello from %s", r.Host) })
	srv := httptest.NewServer(hello)
	defer srv.Close()
	var reached atomic.Int32
	other := httptest.NewUnstartedServer(hello)
	other.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			reached.Add(1)
		}
	}
	other.Start()
	defer other.Close()
	sp, op := srv.Listener.Addr().(*net.TCPAddr).Port, other.Listener.Addr().(*net.TCPAddr).Port
	run := func(args ...string) result {
		t.Helper()
		cmd := exec.Command(moatBin(t), args...)
		cmd.Dir = os.TempDir()
		cmd.Env = append(os.Environ(), egressNamesVar+"=api.test=127.0.0.1")
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		return exitResult(t, cmd.Run(), args, &out, &errb)
	}
	// NO_PROXY names localhost (the sandbox's own loopback): --noproxy ''
	// sends every request to the proxy, as a tool that means the host's
	// loopback must.
	curl := func(u string) []string { return []string{"--", "curl", "-sS", "--fail-with-body", "--noproxy", "", u} }
	allow := []string{"run", "--log-format", "human", "--allow-host", fmt.Sprintf("localhost:%d", sp), "--allow-host", "api.test", "--allow-cidr", fmt.Sprintf("127.0.0.1/32:%d", sp)}
	for _, host := range []string{"localhost", "LOCALHOST.", "api.test", "127.0.0.1"} {
		r := run(append(allow, curl(fmt.Sprintf("http://%s:%d/", host, sp))...)...)
		if r.code != 0 || !strings.HasPrefix(r.stdout, "hello from ") {
			t.Errorf("%s on the admitted port: exit %d, stdout %q, stderr %q", host, r.code, r.stdout, r.stderr)
		}
	}
	for _, tc := range []struct{ host, reason string }{
		{"api.test", fmt.Sprintf("127.0.0.1 is loopback, and egress.cidrs admits it on port %d only", sp)},
		{"127.0.0.1", fmt.Sprintf("admit 127.0.0.1 on port %d only", sp)},
		{"localhost", "localhost is not on the policy's egress allowlist"},
	} {
		r := run(append(allow, curl(fmt.Sprintf("http://%s:%d/", tc.host, op))...)...)
		if r.code != 22 || !strings.Contains(r.stderr, "egress denied: ") || !strings.Contains(r.stderr, tc.reason) {
			t.Errorf("%s on another port: exit %d, stderr %q, want curl's 22 and a denial saying %q", tc.host, r.code, r.stderr, tc.reason)
		}
	}
	if n := reached.Load(); n != 0 {
		t.Errorf("the loopback server on the port no range admits was reached %d times", n)
	}
	r := run("run", "--allow-host", fmt.Sprintf("localhost:%d", sp), "--", "/bin/true")
	if r.code != exitUsage || !strings.Contains(r.stderr, "egress.allow[0]") || !strings.Contains(r.stderr, fmt.Sprintf("--allow-cidr 127.0.0.1/32:%d", sp)) {
		t.Errorf("localhost without a range: exit %d, stderr %q", r.code, r.stderr)
	}
	r = run("run", "--allow-cidr", "fd00::/8:443", "--allow-cidr", "10.0.0.0/8:0", "--", "/bin/true")
	if r.code != exitUsage || !strings.Contains(r.stderr, "egress.cidrs[0]") || !strings.Contains(r.stderr, "write [fd00::]/8:443") ||
		!strings.Contains(r.stderr, "egress.cidrs[1]") || !strings.Contains(r.stderr, "port out of range") {
		t.Errorf("bad --allow-cidr: exit %d, stderr %q", r.code, r.stderr)
	}
}
