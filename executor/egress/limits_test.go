package egress

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The proxy's bounds, each tried by a hostile tool or a hostile server on
// an allowed name. Memory is measured with runtime.ReadMemStats in this
// process, where the proxy runs: a bound on bytes allocated, not on time.
// Timeouts are set short and the waits for them long (10 s and more), so
// a slow machine makes a test slower, never wrong.

const (
	hostileBytes = 256 << 20 // what a hostile peer sends: 4096 times the head cap
	// allocBound is what one hostile head may make the proxy allocate:
	// limits.go's 5 × the cap, and slack for the test's own goroutines.
	allocBound = 5*DefaultMaxHeaderBytes + 1<<20
	patience   = 20 * time.Second // the longest a test waits for a bounded wait
)

// allocated returns the bytes this process allocated while f ran.
func allocated(f func()) uint64 {
	var a, b runtime.MemStats
	runtime.ReadMemStats(&a)
	f()
	runtime.ReadMemStats(&b)
	return b.TotalAlloc - a.TotalAlloc
}

// filler is what flood sends, allocated once (outside the measures).
var filler = bytes.Repeat([]byte{'a'}, 1<<20)

// flood writes prefix, then filler up to total bytes, to c, and stops at
// the first error (the proxy closed the connection).
func flood(c net.Conn, prefix []byte, total int) {
	if _, err := c.Write(prefix); err != nil {
		return
	}
	for sent := len(prefix); sent < total; sent += len(filler) {
		if _, err := c.Write(filler); err != nil {
			return
		}
	}
}

// dialSandbox connects to s's socket with patience as the deadline.
func dialSandbox(t *testing.T, s *Sandbox) net.Conn {
	t.Helper()
	c, err := net.Dial("unix", s.Socket())
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(patience))
	t.Cleanup(func() { c.Close() })
	return c
}

// answer reads the proxy's reply on c: its status and body.
func answer(t *testing.T, c net.Conn) (int, string) {
	t.Helper()
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no reply from the proxy: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// TestHostileRequestHeadsAreCapped: a head over the cap, in its request
// line, in one field, or in its number of fields, is refused with 414 or
// 431 saying so, counted as a denial, and costs the proxy the cap, not
// what the tool sent (256 MiB: on main, the proxy read and kept all of it,
// and answered nothing).
func TestHostileRequestHeadsAreCapped(t *testing.T) {
	p := newProxy(t)
	for _, tc := range []struct {
		name   string
		prefix string
		total  int
		code   int
		says   string
	}{
		{"a request line without end", "GET http://api.test/", hostileBytes, http.StatusRequestURITooLong, "request line is longer than the proxy's limit of 65536 bytes"},
		{"a field without end", "GET http://api.test/ HTTP/1.1\r\nX-Big: ", hostileBytes, http.StatusRequestHeaderFieldsTooLarge, "request head is over the proxy's limit of 65536 bytes"},
		{"too many fields", "GET http://api.test/ HTTP/1.1\r\n" + strings.Repeat("A:\r\n", maxHeadLines), 0, http.StatusRequestHeaderFieldsTooLarge, "256 lines"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := open(t, p, testPolicy)
			c := dialSandbox(t, s)
			done := make(chan struct{})
			var code int
			var body string
			n := allocated(func() {
				go func() { defer close(done); flood(c, []byte(tc.prefix), tc.total) }()
				code, body = answer(t, c)
				c.Close()
				<-done
			})
			if code != tc.code || !strings.Contains(body, tc.says) {
				t.Errorf("reply %d %q, want %d saying %q", code, body, tc.code, tc.says)
			}
			if n > allocBound {
				t.Errorf("the proxy allocated %d MiB for one hostile head (bound %d MiB)", n>>20, allocBound>>20)
			}
			if d := s.Usage().Denials; d != 1 {
				t.Errorf("denials %d, want 1", d)
			}
		})
	}
}

// TestHeadsAtTheCapPass: a head of exactly the cap's bytes and lines is
// served; one byte or one line more is refused.
func TestHeadsAtTheCapPass(t *testing.T) {
	srv := hostileServer(t, func(c net.Conn) {
		http.ReadRequest(bufio.NewReader(c))
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
	})
	const max = 4 << 10
	p := newProxy(t, WithMaxHeaderBytes(max))
	s := open(t, p, testPolicy)
	start := "GET http://api.test:" + srv + "/ HTTP/1.1\r\nHost: api.test\r\n"
	pad := func(extra int) string {
		return start + "X: " + strings.Repeat("a", max-len(start)-len("X: \r\n\r\n")+extra) + "\r\n\r\n"
	}
	lines := func(n int) string { // n lines, start line included
		return start + strings.Repeat("A:\r\n", n-2) + "\r\n"
	}
	for _, tc := range []struct {
		name, head string
		code       int
	}{
		{"the cap's bytes", pad(0), 200},
		{"a byte more", pad(1), http.StatusRequestHeaderFieldsTooLarge},
		{"the cap's lines", lines(maxHeadLines), 200},
		{"a line more", lines(maxHeadLines + 1), http.StatusRequestHeaderFieldsTooLarge},
	} {
		c := dialSandbox(t, s)
		io.WriteString(c, tc.head)
		if code, body := answer(t, c); code != tc.code {
			t.Errorf("%s (%d bytes): %d %q, want %d", tc.name, len(tc.head), code, body, tc.code)
		}
	}
}

// TestPipelinedHeadIsCapped: a request sent on a keep-alive connection
// with the start of the next, so that the next begins in bytes the proxy
// already buffered, cut mid-line, has its lines counted from its start:
// the head's end is not mistaken for it, and the cap holds.
func TestPipelinedHeadIsCapped(t *testing.T) {
	srv := hostileServer(t, func(c net.Conn) {
		http.ReadRequest(bufio.NewReader(c))
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
	})
	s := open(t, newProxy(t), testPolicy)
	c := dialSandbox(t, s)
	get := "GET http://api.test:" + srv + "/ HTTP/1.1\r\nHost: api.test"
	io.WriteString(c, get+"\r\n\r\n"+get)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("the first request: %v %v", resp, err)
	}
	io.Copy(io.Discard, resp.Body)
	io.WriteString(c, "\r\n"+strings.Repeat("A:\r\n", maxHeadLines)+"\r\n")
	resp, err = http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("a pipelined head of %d lines: %v %v, want 431", maxHeadLines+2, resp, err)
	}
}

// TestHeadTimeoutHoldsAgainstATrickle: a tool that sends its head a byte
// at a time, or its SOCKS5 greeting, keeps its connection no longer than
// the head timeout, which no byte renews; an HTTP one is told so (408).
func TestHeadTimeoutHoldsAgainstATrickle(t *testing.T) {
	p := newProxy(t, WithHeadTimeout(300*time.Millisecond))
	s := open(t, p, testPolicy)
	trickle := func(c net.Conn, b []byte, every time.Duration) {
		for i := 0; ; i++ {
			if _, err := c.Write(b[i%len(b) : i%len(b)+1]); err != nil {
				return
			}
			time.Sleep(every)
		}
	}
	t.Run("http", func(t *testing.T) {
		c := dialSandbox(t, s)
		go trickle(c, []byte("GET http://api.test/ HTTP/1.1\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaa"), 20*time.Millisecond)
		if code, body := answer(t, c); code != http.StatusRequestTimeout || !strings.Contains(body, "did not arrive within 300ms") {
			t.Errorf("a trickled head: %d %q, want 408", code, body)
		}
	})
	t.Run("socks5", func(t *testing.T) {
		c := dialSandbox(t, s)
		// A greeting that lists 255 methods, a byte each 100 ms: 25 s
		// for the whole, more than the test's patience.
		go trickle(c, append([]byte{5, 255}, bytes.Repeat([]byte{1}, 255)...), 100*time.Millisecond)
		start := time.Now()
		got, err := io.ReadAll(c)
		// Closed with the trickle's bytes unread: a reset, not an EOF.
		if errors.Is(err, syscall.ECONNRESET) {
			err = nil
		}
		if err != nil || len(got) != 0 || time.Since(start) >= patience {
			t.Errorf("a trickled SOCKS5 greeting held its connection: %v after %v, then %v", err, time.Since(start), got)
		}
	})
}

// hostileServer listens on the host's loopback, where api.test points,
// serves each connection with serve, and returns its port.
func hostileServer(t *testing.T, serve func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				serve(c)
			}()
		}
	}()
	return strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
}

// TestHostileResponseHeadsAreCapped: a server on an allowed name that
// sends a response head over the cap, in bytes or in lines, never
// answers, or trickles its head, costs the proxy the cap and the
// response header timeout at most, and the tool gets a 502 saying which.
// On main the proxy read and kept the 256 MiB, and waited forever for the
// silent and the trickling server.
func TestHostileResponseHeadsAreCapped(t *testing.T) {
	// stop ends the servers' writing loops when the test is done.
	stop := make(chan struct{})
	defer close(stop)
	servers := []struct {
		name  string
		serve func(net.Conn)
		says  string
	}{
		{"a head of 256 MiB", func(c net.Conn) {
			http.ReadRequest(bufio.NewReader(c))
			flood(c, []byte("HTTP/1.1 200 OK\r\nX-Big: "), hostileBytes)
		}, "over the proxy's limit of 65536 bytes or 256 lines"},
		{"too many fields", func(c net.Conn) {
			http.ReadRequest(bufio.NewReader(c))
			io.WriteString(c, "HTTP/1.1 200 OK\r\n"+strings.Repeat("A:\r\n", maxHeadLines)+"\r\n")
		}, "over the proxy's limit of 65536 bytes or 256 lines"},
		{"no answer", func(c net.Conn) {
			<-stop
		}, "sent no complete response head within 300ms"},
		{"a trickle", func(c net.Conn) {
			http.ReadRequest(bufio.NewReader(c))
			io.WriteString(c, "HTTP/1.1 200 OK\r\n")
			for {
				select {
				case <-stop:
					return
				case <-time.After(20 * time.Millisecond):
				}
				if _, err := io.WriteString(c, "a"); err != nil {
					return
				}
			}
		}, "sent no complete response head within 300ms"},
	}
	p := newProxy(t, WithResponseHeaderTimeout(300*time.Millisecond))
	for _, tc := range servers {
		t.Run(tc.name, func(t *testing.T) {
			port := hostileServer(t, tc.serve)
			s := open(t, p, testPolicy)
			c := dialSandbox(t, s)
			var code int
			var body string
			n := allocated(func() {
				fmt.Fprintf(c, "GET http://api.test:%s/ HTTP/1.1\r\nHost: api.test\r\n\r\n", port)
				code, body = answer(t, c)
			})
			if code != http.StatusBadGateway || !strings.Contains(body, tc.says) {
				t.Errorf("reply %d %q, want 502 saying %q", code, body, tc.says)
			}
			if n > allocBound {
				t.Errorf("the proxy allocated %d MiB for one hostile response head (bound %d MiB)", n>>20, allocBound>>20)
			}
		})
	}
}

// TestIdleExchangesEnd: a tunnel or a plain response in which no byte
// moves for the idle timeout is closed, the tool's side and the
// upstream's; one whose bytes keep moving is not. On main an idle tunnel
// held its slot for as long as the tool and the server did.
func TestIdleExchangesEnd(t *testing.T) {
	hold := make(chan struct{})
	defer close(hold)
	silent := hostileServer(t, func(c net.Conn) { <-hold })
	stalled := hostileServer(t, func(c net.Conn) {
		http.ReadRequest(bufio.NewReader(c))
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nten bytes.")
		<-hold
	})
	echo := hostileServer(t, func(c net.Conn) { io.Copy(c, c) })
	const idle = time.Second
	p := newProxy(t, WithIdleTimeout(idle))
	s := open(t, p, testPolicy)
	t.Run("a silent tunnel", func(t *testing.T) {
		c, code := socksConnect(t, s, "api.test", silent)
		defer c.Close()
		if code != socksOK {
			t.Fatalf("SOCKS5 connect: %d", code)
		}
		c.SetReadDeadline(time.Now().Add(patience))
		if _, err := c.Read(make([]byte, 1)); err != io.EOF {
			t.Errorf("a silent tunnel was not closed: %v", err)
		}
	})
	t.Run("a stalled body", func(t *testing.T) {
		c := dialSandbox(t, s)
		fmt.Fprintf(c, "GET http://api.test:%s/ HTTP/1.1\r\nHost: api.test\r\n\r\n", stalled)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(resp.Body)
		if string(got) != "ten bytes." || !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("a stalled body: %q %v, want its ten bytes, then its end", got, err)
		}
	})
	t.Run("a busy tunnel", func(t *testing.T) {
		c, code := socksConnect(t, s, "api.test", echo)
		defer c.Close()
		if code != socksOK {
			t.Fatalf("SOCKS5 connect: %d", code)
		}
		// A byte each 50 ms for three idle timeouts: never idle for one.
		b := make([]byte, 1)
		for end := time.Now().Add(3 * idle); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
			c.SetDeadline(time.Now().Add(patience))
			if _, err := c.Write(b); err != nil {
				t.Fatalf("a busy tunnel was cut: %v", err)
			}
			if _, err := io.ReadFull(c, b); err != nil {
				t.Fatalf("a busy tunnel was cut: %v", err)
			}
		}
	})
}

// TestTotalConnsAreCappedAcrossSandboxes: the proxy's cap holds across
// its sandboxes (each under its own cap): a connection beyond it is
// closed unserved and counted as its sandbox's denial, and a slot freed
// serves the next. On main each sandbox had its own cap only.
func TestTotalConnsAreCappedAcrossSandboxes(t *testing.T) {
	srv := hostileServer(t, func(c net.Conn) { io.Copy(io.Discard, c) })
	const total = 6
	p := newProxy(t, WithMaxTotalConns(total), WithMaxConns(total))
	a, b := open(t, p, testPolicy), open(t, p, testPolicy)
	var held []net.Conn
	for i := range total {
		s := a
		if i%2 == 1 {
			s = b
		}
		c, code := socksConnect(t, s, "api.test", srv)
		if code != socksOK {
			t.Fatalf("connection %d, within the caps, refused: %d", i, code)
		}
		held = append(held, c)
	}
	for _, s := range []*Sandbox{a, b} {
		c := dialSandbox(t, s)
		c.Write([]byte{5, 1, 0})
		if got, _ := io.ReadAll(c); len(got) != 0 {
			t.Errorf("a connection over the proxy's cap was served: %v", got)
		}
		if d := s.Usage().Denials; d != 1 {
			t.Errorf("denials %d, want 1", d)
		}
	}
	held[0].Close()
	// The freed slot comes back once the proxy saw the close.
	deadline := time.Now().Add(patience)
	for {
		c, err := net.Dial("unix", b.Socket())
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(patience))
		c.Write([]byte{5, 1, 0})
		var r [2]byte
		_, err = io.ReadFull(c, r[:])
		c.Close()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a freed slot was never given back")
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, c := range held[1:] {
		c.Close()
	}
}

// TestHeadMemoryIsBounded: connections that each hold a hostile head in
// the middle of its read (just under the cap: one long request line, or
// the most fields of the most bytes; and a head of tiny fields, which
// textproto inflates most) cost the proxy at most limits.go's
// per-connection bound each, allocated and held. On main, the head of
// tiny fields held about 1.2 MB each.
func TestHeadMemoryIsBounded(t *testing.T) {
	const max = DefaultMaxHeaderBytes
	start := "GET http://api.test/ HTTP/1.1\r\n"
	var tiny, most strings.Builder
	tiny.WriteString(start)
	for i := 0; tiny.Len() < max-100; i++ {
		fmt.Fprintf(&tiny, "%x:\r\n", i)
	}
	// Distinct keys of about 120 bytes, values as long: each a string of
	// the parse.
	most.WriteString(start)
	for i := range maxHeadLines - 2 {
		half := strings.Repeat("a", (max/maxHeadLines-16)/2)
		fmt.Fprintf(&most, "X-%04x-%s: %s\r\n", i, half, half)
	}
	for _, tc := range []struct{ name, head string }{
		{"one long request line", "GET http://api.test/" + strings.Repeat("a", max-100)},
		{"the most fields of the most bytes", most.String()},
		{"tiny fields", tiny.String()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A proxy of its own, closed (its handlers done) before the
			// next case measures.
			s := open(t, newProxy(t), testPolicy)
			head := []byte(tc.head)
			const conns = 16
			// Two collections: the first moves sync.Pool's buffers to its
			// victim cache, the second frees them.
			var before, read, held runtime.MemStats
			runtime.GC()
			runtime.GC()
			runtime.ReadMemStats(&before)
			for range conns {
				c := dialSandbox(t, s)
				if _, err := c.Write(head); err != nil {
					t.Fatal(err)
				}
			}
			// Each head is read to its last byte, or refused (and its
			// connection closed, its memory free).
			deadline := time.Now().Add(patience)
			for u := s.Usage(); u.BytesOut < conns*int64(len(tc.head)) && u.Denials < conns; u = s.Usage() {
				if time.Now().After(deadline) {
					t.Fatalf("the proxy read %d of %d bytes and refused %d heads", u.BytesOut, conns*len(tc.head), u.Denials)
				}
				time.Sleep(10 * time.Millisecond)
			}
			runtime.ReadMemStats(&read)
			runtime.GC()
			runtime.GC()
			runtime.ReadMemStats(&held)
			if got, bound := (read.TotalAlloc-before.TotalAlloc)/conns, uint64(5*max+24<<10); got > bound {
				t.Errorf("a connection with a hostile head allocated %d KiB (bound %d KiB)", got>>10, bound>>10)
			}
			if held.HeapAlloc > before.HeapAlloc {
				if got, bound := (held.HeapAlloc-before.HeapAlloc)/conns, uint64(3*max+24<<10); got > bound {
					t.Errorf("a connection with a hostile head holds %d KiB (bound %d KiB)", got>>10, bound>>10)
				}
			}
			t.Logf("per connection: %d KiB allocated, %d KiB held; usage %+v", (read.TotalAlloc-before.TotalAlloc)/conns>>10, int64(held.HeapAlloc-before.HeapAlloc)/conns>>10, s.Usage())
		})
	}
}

// TestLimitsMustBeSensible: a limit that could not work is an error of
// New naming its option.
func TestLimitsMustBeSensible(t *testing.T) {
	for _, tc := range []struct {
		opt  Option
		says string
	}{
		{WithMaxTotalConns(0), "WithMaxTotalConns"},
		{WithMaxHeaderBytes(100), "WithMaxHeaderBytes"},
		{WithHeadTimeout(0), "WithHeadTimeout"},
		{WithResponseHeaderTimeout(-time.Second), "WithResponseHeaderTimeout"},
		{WithIdleTimeout(0), "WithIdleTimeout"},
		{WithDialTimeout(0), "dial timeout"},
	} {
		if p, err := New(tc.opt); err == nil || !strings.Contains(err.Error(), tc.says) {
			if p != nil {
				p.Close()
			}
			t.Errorf("New with a bad %s: %v", tc.says, err)
		}
	}
}

// TestChunkedFramingIsBounded: what net/http bounds itself and the proxy
// relies on (limits.go): a chunk-size line or a trailer without end, from
// the tool or from a server, costs the 4 KiB buffers, not what is sent.
// These hold on main too: they guard the 4 KiB readers the bound assumes.
func TestChunkedFramingIsBounded(t *testing.T) {
	sink := hostileServer(t, func(c net.Conn) { io.Copy(io.Discard, c) })
	hostileChunk := hostileServer(t, func(c net.Conn) {
		http.ReadRequest(bufio.NewReader(c))
		flood(c, []byte("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1;ext="), hostileBytes)
	})
	hostileTrailer := hostileServer(t, func(c net.Conn) {
		http.ReadRequest(bufio.NewReader(c))
		flood(c, []byte("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n0\r\nX-Trailer: "), hostileBytes)
	})
	p := newProxy(t, WithResponseHeaderTimeout(300*time.Millisecond))
	for _, tc := range []struct {
		name, port, prefix string
		tool               bool // the tool floods (its body), else the server
	}{
		{"the tool's chunk line", sink, "1;ext=", true},
		{"the tool's trailer", sink, "1\r\na\r\n0\r\nX-Trailer: ", true},
		{"the server's chunk line", hostileChunk, "", false},
		{"the server's trailer", hostileTrailer, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := open(t, p, testPolicy)
			c := dialSandbox(t, s)
			head := fmt.Sprintf("POST http://api.test:%s/ HTTP/1.1\r\nHost: api.test\r\nTransfer-Encoding: chunked\r\n\r\n", tc.port)
			if !tc.tool {
				head = fmt.Sprintf("GET http://api.test:%s/ HTTP/1.1\r\nHost: api.test\r\n\r\n", tc.port)
			}
			n := allocated(func() {
				if tc.tool {
					flood(c, []byte(head+tc.prefix), hostileBytes)
				} else {
					io.WriteString(c, head)
				}
				io.Copy(io.Discard, c) // whatever comes, until the proxy ends it
			})
			if n > allocBound {
				t.Errorf("the proxy allocated %d MiB for a hostile chunked body (bound %d MiB)", n>>20, allocBound>>20)
			}
		})
	}
}
