package egress

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/moat-sandbox/moat/policies"
)

// The proxy's cost, side by side with a direct connection to the same
// local server: per request (a fresh connection each, as a tool's
// one-off fetch makes), and throughput through a CONNECT tunnel.
//
//	go test -run '^$' -bench . ./executor/egress

const blob = 32 << 20

func benchServer(b *testing.B) (*httptest.Server, string) {
	data := make([]byte, blob)
	rand.Read(data)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/blob" {
			w.Write(data)
			return
		}
		io.WriteString(w, "ok")
	}))
	b.Cleanup(srv.Close)
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	return srv, port
}

func benchSandbox(b *testing.B) *Sandbox {
	return open(b, newProxy(b), policies.Egress{Allow: []string{"api.test"}, CIDRs: []string{"127.0.0.1/32"}})
}

// get does one GET on a fresh connection c and reads the whole response.
func get(b *testing.B, c net.Conn, target, host string) int64 {
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", target, host)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		b.Fatal(err)
	}
	n, err := io.Copy(io.Discard, resp.Body)
	if err != nil || resp.StatusCode != 200 {
		b.Fatalf("%d %v", resp.StatusCode, err)
	}
	resp.Body.Close()
	return n
}

func BenchmarkRequest(b *testing.B) {
	srv, port := benchServer(b)
	s := benchSandbox(b)
	b.Run("direct", func(b *testing.B) {
		for b.Loop() {
			c, err := net.Dial("tcp", srv.Listener.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			get(b, c, "/", "api.test")
			c.Close()
		}
	})
	b.Run("proxy-http", func(b *testing.B) {
		for b.Loop() {
			c, err := net.Dial("unix", s.Socket())
			if err != nil {
				b.Fatal(err)
			}
			get(b, c, "http://api.test:"+port+"/", "api.test")
			c.Close()
		}
	})
	b.Run("proxy-connect", func(b *testing.B) {
		for b.Loop() {
			c := tunnel(b, s, port)
			get(b, c, "/", "api.test")
			c.Close()
		}
	})
}

// tunnel opens a CONNECT tunnel to api.test:port through s.
func tunnel(b *testing.B, s *Sandbox, port string) net.Conn {
	c, err := net.Dial("unix", s.Socket())
	if err != nil {
		b.Fatal(err)
	}
	fmt.Fprintf(c, "CONNECT api.test:%s HTTP/1.1\r\nHost: api.test:%s\r\n\r\n", port, port)
	var buf [39]byte // "HTTP/1.1 200 Connection established\r\n\r\n"
	if _, err := io.ReadFull(c, buf[:]); err != nil || string(buf[:12]) != "HTTP/1.1 200" {
		b.Fatalf("CONNECT: %q %v", buf, err)
	}
	return c
}

func BenchmarkThroughput(b *testing.B) {
	srv, port := benchServer(b)
	s := benchSandbox(b)
	b.Run("direct", func(b *testing.B) {
		b.SetBytes(blob)
		for b.Loop() {
			c, err := net.Dial("tcp", srv.Listener.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			get(b, c, "/blob", "api.test")
			c.Close()
		}
	})
	b.Run("proxy-connect", func(b *testing.B) {
		b.SetBytes(blob)
		for b.Loop() {
			c := tunnel(b, s, port)
			if n := get(b, c, "/blob", "api.test"); n != blob {
				b.Fatal("short read " + strconv.FormatInt(n, 10))
			}
			c.Close()
		}
	})
}

// BenchmarkReadRequest is the head cap's own cost, in memory: a tool's
// usual request head read by net/http bare, and through headReader as the
// proxy reads it.
func BenchmarkReadRequest(b *testing.B) {
	head := []byte("GET http://api.test/simple/requests/ HTTP/1.1\r\nHost: api.test\r\nUser-Agent: pip/24.0 CPython/3.11\r\n" +
		"Accept: */*\r\nAccept-Encoding: gzip, deflate\r\nConnection: keep-alive\r\n\r\n")
	r := bytes.NewReader(head)
	br := bufio.NewReader(r)
	b.Run("bare", func(b *testing.B) {
		for b.Loop() {
			r.Reset(head)
			br.Reset(r)
			if _, err := http.ReadRequest(br); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("capped", func(b *testing.B) {
		h := &headReader{r: r}
		for b.Loop() {
			r.Reset(head)
			br.Reset(h)
			h.begin(DefaultMaxHeaderBytes, nil)
			if _, err := http.ReadRequest(br); err != nil {
				b.Fatal(err)
			}
			h.end()
		}
	})
}
