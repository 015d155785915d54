package native_test

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/conformance"
	"github.com/moat-sandbox/moat/conformance/testenv"
	"github.com/moat-sandbox/moat/executor"
	"github.com/moat-sandbox/moat/executor/native"
	"github.com/moat-sandbox/moat/nsexec"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// inNoUserNSOrRefused runs body in a user namespace where no user
// namespace can be made (testenv.InNoUserNS), as the caller and, as
// root, again as nobody; where the kernel's Landlock cannot hold the
// rung's egress (below ABI 4: the VM's 2 refuses the rung itself first),
// it checks New's refusal instead: a typed error naming the ABI.
func inNoUserNSOrRefused(t *testing.T, body func(t *testing.T)) {
	t.Helper()
	if testenv.InNoUserNS(t) {
		if !testenv.ReRun() && !t.Failed() && os.Geteuid() == 0 {
			testenv.RunAsUser(t, testenv.NobodyUID, testenv.NobodyGID)
		}
		return
	}
	abi := nsexec.LandlockABI()
	if abi >= nsexec.NoUserNSEgressABI {
		body(t)
		return
	}
	_, err := native.New(native.WithPolicy(egressPolicy(t)), native.WithoutCgroups(), native.WithEgressProxy(newTestProxy(t)))
	var le *nsexec.LandlockABIError
	var ee *nsexec.EgressModeError
	switch {
	case abi < nsexec.NoUserNSMinABI && errors.As(err, &le) && le.Have == abi:
	case errors.As(err, &ee) && ee.Need == nsexec.NoUserNSEgressABI && ee.Have == abi && strings.Contains(err.Error(), "ABI "+strconv.Itoa(abi)):
	default:
		t.Fatalf("Landlock ABI %d: New with egress in no-userns = %v, want the typed refusal naming the ABI", abi, err)
	}
}

// TestNoUserNSEgressThroughTheProxy: in the no-userns rung a policy with
// egress runs, its tool reaching the allowed name over TLS (verified
// against the test CA) and plain HTTP through the proxy variables, which
// name the sandbox's own loopback port, and nothing else: an unlisted
// name is the proxy's 403, a direct connect to the host's loopback server
// is Landlock's refusal, UDP is the filter's. The posture says the port's
// limit among the drops.
func TestNoUserNSEgressThroughTheProxy(t *testing.T) {
	inNoUserNSOrRefused(t, func(t *testing.T) {
		srv := startServers(t)
		proxy := newTestProxy(t)
		record, usageOf := recordUsage()
		p := egressProvider(t, proxy, egressPolicy(t), record, native.WithBinds(specs.Mount{Source: srv.caDir, Destination: srv.caDir, Options: []string{"ro"}}))
		post := p.Posture()
		n := post.Isolation.Native
		if n.Mode != string(nsexec.ModeNoUserNS) || post.Isolation.Network != "egress" || n.Egress == nil ||
			!strings.Contains(n.Egress.Proxy, "any address") || !strings.Contains(strings.Join(n.ModeDrops, "\n"), nsexec.NoUserNSEgressDrop) {
			t.Fatalf("posture: mode %q, network %q, egress %+v, drops %q", n.Mode, post.Isolation.Network, n.Egress, n.ModeDrops)
		}
		if err := executor.StrictFloor(post); err == nil {
			t.Error("the strict floor accepted a no-userns posture with egress")
		}
		other, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer other.Close()
		go func() {
			for {
				c, err := other.Accept()
				if err != nil {
					return
				}
				c.Close()
			}
		}()
		tlsPort, plainPort := srv.port(srv.tls), srv.port(srv.plain)
		ca := srv.caDir + "/ca.pem"
		steps := []struct{ name, cmd, want string }{
			{"the proxy variable", `echo "$http_proxy $HTTPS_PROXY"`, "http://127.0.0.1:"},
			{"curl https", "curl -sS --cacert " + ca + " https://api.test:" + tlsPort + "/", "hello from api.test:" + tlsPort},
			{"curl http", "curl -sS http://api.test:" + plainPort + "/", "hello from api.test:" + plainPort},
			{"urllib http", `python3 -c 'import urllib.request as u; print(u.urlopen("http://api.test:` + plainPort + `/").read().decode())'`, "hello from api.test:" + plainPort},
			{"unlisted name", "curl -sS http://unlisted.test:" + plainPort + "/", "unlisted.test is not on the policy's egress allowlist"},
			{"direct to the host's loopback server", "curl -sS --noproxy '*' http://127.0.0.1:" + plainPort + "/", "Failed to connect to 127.0.0.1"},
			{"another port of 127.0.0.1", `python3 -c 'import socket; socket.create_connection(("127.0.0.1", ` + strconv.Itoa(other.Addr().(*net.TCPAddr).Port) + `), 3)' 2>&1 | tail -1`, "PermissionError"},
			{"udp", `python3 -c 'import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM)' 2>&1 | tail -1`, "PermissionError"},
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
		if strings.Contains(out, "127.0.0.1:"+strconv.Itoa(native.EgressPort)) {
			t.Errorf("the proxy variables name full mode's forwarder, not the sandbox's port:\n%s", out)
		}
		if u := usageOf(); u.Connections != 3 || u.Denials != 1 {
			t.Errorf("usage %+v, want 3 connections and 1 denial", u)
		}
	})
}

// TestEgressConformanceNoUserNS: a policy with an egress section keeps
// the kit's claim of the no-userns rung, the network's included (the
// host's loopback listener is not reached: Landlock allows the proxy's
// port only).
func TestEgressConformanceNoUserNS(t *testing.T) {
	inNoUserNSOrRefused(t, func(t *testing.T) {
		claim := conformance.ModeIsolation(string(nsexec.ModeNoUserNS))
		if nsexec.LandlockABI() < 6 {
			claim.Network = false // the host's abstract sockets are scoped from ABI 6 only
		}
		proxy := newTestProxy(t)
		conformance.Run(t, policyProvider("default", native.WithPolicy(egressPolicy(t)), native.WithEgressProxy(proxy)), conformance.WithIsolation(claim))
	})
}

// Below Landlock ABI 4, raised here to one above this kernel's, a policy
// with egress is refused in no-userns: an *nsexec.EgressModeError naming
// both ABIs, where the rung itself runs.
func TestNoUserNSEgressBelowABI(t *testing.T) {
	if testenv.InNoUserNS(t) {
		return
	}
	if nsexec.LandlockABI() < nsexec.NoUserNSMinABI {
		return // the rung itself is refused first (TestNoUserNSMode)
	}
	defer func(v int) { nsexec.NoUserNSEgressABI = v }(nsexec.NoUserNSEgressABI)
	nsexec.NoUserNSEgressABI = nsexec.LandlockABI() + 1
	_, err := native.New(native.WithPolicy(egressPolicy(t)), native.WithoutCgroups(), native.WithEgressProxy(newTestProxy(t)))
	var ee *nsexec.EgressModeError
	if !errors.As(err, &ee) || ee.Mode != nsexec.ModeNoUserNS || ee.Need != nsexec.NoUserNSEgressABI ||
		!strings.Contains(err.Error(), "ABI "+strconv.Itoa(ee.Need)) || !strings.Contains(err.Error(), "ABI "+strconv.Itoa(ee.Have)) {
		t.Fatalf("egress in no-userns below ABI %d: %v, want an *nsexec.EgressModeError naming both ABIs", ee.Need, err)
	}
}
