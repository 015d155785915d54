package egress

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestExpectContinueIsAnswered: a POST with "Expect: 100-continue", as
// curl sends one with a body over 1 KiB, gets a 100 Continue before it
// sends its body, and then the upstream's final response. On main the
// proxy waited for the body the tool held back (curl sends it anyway after
// a second), and when the upstream answered 100 the proxy took it for the
// whole answer and lost the final one.
func TestExpectContinueIsAnswered(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body) // reading the body makes net/http send the 100
		fmt.Fprintf(w, "got %d bytes", len(b))
	}))
	t.Cleanup(srv.Close)
	p := newProxy(t)
	s := open(t, p, testPolicy)
	c := dialSandbox(t, s)
	body := strings.Repeat("x", 4096)
	fmt.Fprintf(c, "POST http://api.test:%s/ HTTP/1.1\r\nHost: api.test\r\nContent-Length: %d\r\nExpect: 100-continue\r\n\r\n", port(t, srv), len(body))
	br := bufio.NewReader(c)
	// The tool waits for the 100 before it sends the body, as curl does
	// (for a second, then it sends anyway; this one waits as long as it
	// must).
	interim, err := http.ReadResponse(br, nil)
	if err != nil || interim.StatusCode != http.StatusContinue {
		t.Fatalf("first response %v (%v), want 100 Continue", interim, err)
	}
	io.WriteString(c, body)
	final, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no final response after the 100: %v", err)
	}
	got, _ := io.ReadAll(final.Body)
	if final.StatusCode != http.StatusOK || string(got) != "got 4096 bytes" {
		t.Errorf("final response %d %q, want 200 \"got 4096 bytes\"", final.StatusCode, got)
	}
}

// TestInterimResponsesAreForwarded: an upstream's interim responses (a 103
// Early Hints) reach the tool before its final response (RFC 9110 15.2);
// on main the first interim response was taken for the whole answer.
func TestInterimResponsesAreForwarded(t *testing.T) {
	up := hostileServer(t, func(c net.Conn) {
		http.ReadRequest(bufio.NewReader(c))
		io.WriteString(c, "HTTP/1.1 103 Early Hints\r\nLink: </s.css>; rel=preload\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfinal")
	})
	p := newProxy(t)
	s := open(t, p, testPolicy)
	c := dialSandbox(t, s)
	fmt.Fprintf(c, "GET http://api.test:%s/ HTTP/1.1\r\nHost: api.test\r\n\r\n", up)
	br := bufio.NewReader(c)
	early, err := http.ReadResponse(br, nil)
	if err != nil || early.StatusCode != http.StatusEarlyHints || early.Header.Get("Link") != "</s.css>; rel=preload" {
		t.Fatalf("first response %v (%v), want the 103 with its Link", early, err)
	}
	final, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no final response after the 103: %v", err)
	}
	got, _ := io.ReadAll(final.Body)
	if final.StatusCode != http.StatusOK || string(got) != "final" {
		t.Errorf("final response %d %q, want 200 \"final\"", final.StatusCode, got)
	}
}

// TestEndlessInterimResponsesAreRefused: a server on an allowed name that
// answers with 1xx responses and never a final one gets the proxy's 502
// after maxInterim of them, instead of holding the tool's connection.
func TestEndlessInterimResponsesAreRefused(t *testing.T) {
	stop := make(chan struct{})
	defer close(stop)
	up := hostileServer(t, func(c net.Conn) {
		http.ReadRequest(bufio.NewReader(c))
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := io.WriteString(c, "HTTP/1.1 102 Processing\r\n\r\n"); err != nil {
				return
			}
		}
	})
	p := newProxy(t)
	s := open(t, p, testPolicy)
	c := dialSandbox(t, s)
	fmt.Fprintf(c, "GET http://api.test:%s/ HTTP/1.1\r\nHost: api.test\r\n\r\n", up)
	br := bufio.NewReader(c)
	for n := 0; ; n++ {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("after %d interim responses: %v, want the proxy's 502", n, err)
		}
		if resp.StatusCode == http.StatusProcessing {
			if n > maxInterim {
				t.Fatalf("the proxy forwarded %d interim responses, more than its bound %d", n, maxInterim)
			}
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusBadGateway || !strings.Contains(string(b), "interim (1xx) responses") {
			t.Errorf("final %d %q, want a 502 naming the interim responses", resp.StatusCode, b)
		}
		return
	}
}
