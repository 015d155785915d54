package egress

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// socketPair is a connected pair of unix stream sockets: the tool's end
// and the proxy's.
func socketPair(t *testing.T) (tool, proxy *net.UnixConn) {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	conn := func(fd int) *net.UnixConn {
		f := os.NewFile(uintptr(fd), "egress-fuzz")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			t.Fatal(err)
		}
		return c.(*net.UnixConn)
	}
	return conn(fds[0]), conn(fds[1])
}

// FuzzProxyRequest feeds the proxy, with nothing allowed, whatever a tool
// may send on its socket (an HTTP proxy request, a SOCKS5 greeting and
// request, or neither). Whatever the bytes: the proxy connects nowhere,
// answers in its protocol's framing (an HTTP status line, or SOCKS
// version 5) or not at all, and ends the connection once the tool has
// sent everything, well before its head timeout. Its head cap is the
// least there is (4 KiB), so inputs of a fuzzer's sizes reach it: a head
// over it gets a 414 or 431, never a parse of what is past the cap.
func FuzzProxyRequest(f *testing.F) {
	for _, s := range []string{
		"GET http://api.test/ HTTP/1.1\r\nHost: api.test\r\n\r\n",
		"CONNECT api.test:443 HTTP/1.1\r\nHost: api.test:443\r\n\r\n",
		"CONNECT 127.0.0.1:80 HTTP/1.1\r\n\r\nGET http://x/ HTTP/1.1\r\n\r\n",
		"POST http://files.test/up HTTP/1.1\r\nHost: files.test\r\nContent-Length: 3\r\n\r\nabc",
		"\x05\x01\x00\x05\x01\x00\x03\x08api.test\x01\xbb",
		"\x05\x01\x00\x05\x01\x00\x01\x7f\x00\x00\x01\x00\x50",
		"\x05\x02\x00\x02\x05\x01\x00\x04\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01\x00\x50",
		"\x16\x03\x01 hello\r\n\r\n",
		"CONNECT LocalHost.:8080 HTTP/1.1\r\n\r\n",
		"\x05\x01\x00\x05\x01\x00\x03\x0dapp.localhost\x1f\x90",
		"GET http://api.test/" + strings.Repeat("a", minHeaderBytes) + " HTTP/1.1\r\n\r\n",
		"GET http://api.test/ HTTP/1.1\r\n" + strings.Repeat("A:\r\n", maxHeadLines) + "\r\n",
		"GET http://api.test/ HTTP/1.1\r\nHost: api.test\r\n\r\nGET http://api.test/ HTTP/1.1\r\nHost: api.test\r\n" + strings.Repeat("B:\r\n", maxHeadLines) + "\r\n",
	} {
		f.Add([]byte(s))
	}
	// Two tripwires for a bypass: a name is resolved only once the
	// allowlist admitted it, and a listener on the host's loopback that a
	// raw-IP request (seeded below) would reach.
	var resolved, accepted atomic.Int64
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		f.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Close()
		}
	}()
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	f.Add([]byte("CONNECT 127.0.0.1:" + port + " HTTP/1.1\r\n\r\n"))
	f.Add([]byte("GET http://127.0.0.1:" + port + "/ HTTP/1.1\r\n\r\n"))
	p, err := New(WithResolver(tripwire{testNames, &resolved}), WithMaxHeaderBytes(minHeaderBytes))
	if err != nil {
		f.Fatal(err)
	}
	defer p.Close()
	s, err := p.Open(&Allowlist{}) // nothing allowed
	if err != nil {
		f.Fatal(err)
	}
	defer s.Close()
	f.Fuzz(func(t *testing.T, data []byte) {
		tool, side := socketPair(t)
		defer tool.Close()
		done := make(chan struct{})
		go func() {
			defer close(done)
			defer side.Close()
			s.handle(&counted{Conn: side, s: s})
		}()
		go func() {
			tool.Write(data) // the proxy may stop reading early
			tool.CloseWrite()
		}()
		tool.SetReadDeadline(time.Now().Add(10 * time.Second))
		got, _ := io.ReadAll(tool)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("the proxy still holds the connection 10 s after the tool sent %q", data)
		}
		if n, a := resolved.Load(), accepted.Load(); n != 0 || a != 0 {
			t.Fatalf("with nothing allowed the proxy resolved %d names and reached the loopback listener %d times; last input %q", n, a, data)
		}
		if n := s.Usage().Connections; n != 0 {
			t.Fatalf("with nothing allowed the proxy connected %d times; last input %q", n, data)
		}
		switch {
		case len(got) == 0:
		case len(data) > 0 && data[0] == socksVersion:
			if got[0] != socksVersion {
				t.Fatalf("SOCKS5 request %q answered %q", data, got)
			}
		case !bytes.HasPrefix(got, []byte("HTTP/1.1 ")) || len(got) < 12:
			t.Fatalf("request %q answered %q, not with an HTTP status line", data, got)
		}
	})
}

// tripwire is a Resolver that counts every lookup it is asked for.
type tripwire struct {
	Hosts
	n *atomic.Int64
}

func (r tripwire) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	r.n.Add(1)
	return r.Hosts.LookupNetIP(ctx, network, host)
}
