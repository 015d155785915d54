package egress

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/conformance/testenv"
)

// TestLoopbackOnlyTheSandboxMayConnect: a sandbox's loopback port
// (OpenLoopback, the no-userns rung's proxy) serves a peer whose socket is
// this process's uid, the sandbox's in that rung, and refuses one of
// another uid (a python3 child as 65534, connecting to the port every user
// of the host can reach) without a reply, counted as a denial; once that
// uid is admitted the same client is served.
func TestLoopbackOnlyTheSandboxMayConnect(t *testing.T) {
	testenv.RequireRoot(t)
	const python = "/usr/bin/python3"
	if _, err := os.Stat(python); err != nil {
		testenv.Skipf(t, "no %s to connect as another user with: install python3", python)
	}
	srv := httptest.NewServer(http.HandlerFunc(hello))
	defer srv.Close()
	p := newProxy(t)
	al, err := NewAllowlist(&testPolicy)
	if err != nil {
		t.Fatal(err)
	}
	s, err := p.OpenLoopback(al)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Socket() != "" || s.Port() == 0 || !strings.HasPrefix(s.Addr(), "127.0.0.1:") {
		t.Fatalf("a loopback sandbox: socket %q, port %d, addr %q", s.Socket(), s.Port(), s.Addr())
	}
	host := "api.test:" + port(t, srv)

	// The sandbox's own uid: served, through the plain proxy variables'
	// address.
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		Proxy:             http.ProxyURL(&url.URL{Scheme: "http", Host: s.Addr()}),
		TLSClientConfig:   &tls.Config{InsecureSkipVerify: true},
		DisableKeepAlives: true,
	}}
	resp, err := c.Get("http://" + host + "/")
	if err != nil {
		t.Fatalf("the sandbox's own uid through %s: %v", s.Addr(), err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("the sandbox's own uid through %s: %s", s.Addr(), resp.Status)
	}
	// Over IPv6 to the v4-mapped address (a tcp6 socket): the same uid, found in /proc/net/tcp6.
	if d, err := (&net.Dialer{}).DialContext(context.Background(), "tcp6", "[::ffff:127.0.0.1]:"+strings.TrimPrefix(s.Addr(), "127.0.0.1:")); err == nil {
		d.Write([]byte("GET http://" + host + "/ HTTP/1.1\r\nHost: " + host + "\r\nConnection: close\r\n\r\n"))
		d.SetReadDeadline(time.Now().Add(10 * time.Second))
		buf := make([]byte, 4096)
		n, _ := d.Read(buf)
		d.Close()
		if !strings.Contains(string(buf[:n]), "200 OK") {
			t.Fatalf("the sandbox's own uid over a v4-mapped tcp6 socket: %q", buf[:n])
		}
	}
	before := s.Usage()

	ask := func() string {
		t.Helper()
		cmd := exec.Command(python, "-c", peerClient, "tcp:"+strings.TrimPrefix(s.Addr(), "127.0.0.1:"),
			"GET http://"+host+"/ HTTP/1.1\r\nHost: "+host+"\r\nConnection: close\r\n\r\n")
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("the client as uid 65534: %v", err)
		}
		return string(out)
	}
	if out := ask(); out != "" {
		t.Fatalf("a host user's connection to the loopback port was served: %q", out)
	}
	if u := s.Usage(); u.Denials != before.Denials+1 || u.Connections != before.Connections {
		t.Fatalf("usage after a stranger's connection: %+v (before %+v); want one denial more and no connection", u, before)
	}
	s.Admit(65534, 1)
	if out := ask(); !strings.Contains(out, "hello "+host) {
		t.Fatalf("an admitted uid's request: %q; want the server's greeting", out)
	}
}

// TestProcAddrSpellsTheKernelsForm: the address pair is matched as text,
// so its spelling is checked against a socket of this process as
// /proc/net/tcp lists it.
func TestProcAddrSpellsTheKernelsForm(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	d, err := net.Dial("tcp4", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	a, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	uid, err := tcpPeerUID(a.(*net.TCPConn))
	if err != nil || uid != uint32(os.Geteuid()) {
		t.Fatalf("the peer of a connection of this process: uid %d, %v; want %d", uid, err, os.Geteuid())
	}
}
