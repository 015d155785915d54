package egress

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// http serves HTTP proxy requests: CONNECT host:port, a tunnel the proxy
// never looks into (TLS stays end to end), and plain requests with an
// absolute http:// URI, forwarded one per connection upstream.
func (s *Sandbox) http(c net.Conn, br *bufio.Reader) {
	for {
		c.SetReadDeadline(time.Now().Add(headTimeout))
		req, err := http.ReadRequest(br)
		if err != nil {
			var ne net.Error
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && !(errors.As(err, &ne) && ne.Timeout()) {
				reply(c, http.StatusBadRequest, "moat egress: not an HTTP proxy request: "+err.Error())
			}
			return
		}
		c.SetReadDeadline(time.Time{})
		if req.Method == http.MethodConnect {
			s.connect(c, br, req)
			return
		}
		if !s.forward(c, req) {
			return
		}
	}
}

// connect opens the tunnel of a CONNECT request.
func (s *Sandbox) connect(c net.Conn, br *bufio.Reader, req *http.Request) {
	host, port, err := splitHostPort(req.Host, 0)
	if err != nil {
		reply(c, http.StatusBadRequest, "moat egress: CONNECT needs host:port: "+err.Error())
		return
	}
	up, err := s.dial(s.ctx, host, port)
	if err != nil {
		s.refuse(c, "connect", err)
		return
	}
	s.connected.Add(1)
	if _, err := c.Write([]byte("HTTP/1.1 200 Connection established\r\n\r\n")); err != nil {
		up.Close()
		return
	}
	s.relay(c, br, up)
}

// forward sends one plain request to its destination and its response
// back; false when the connection is done.
func (s *Sandbox) forward(c net.Conn, req *http.Request) bool {
	if req.URL.Scheme != "http" || req.URL.Host == "" {
		reply(c, http.StatusBadRequest, "moat egress: a plain HTTP request through the proxy needs an absolute http:// URI; use CONNECT (https_proxy) for TLS")
		return false
	}
	host, port, err := splitHostPort(req.URL.Host, 80)
	if err != nil {
		reply(c, http.StatusBadRequest, "moat egress: bad host in the URI: "+err.Error())
		return false
	}
	up, err := s.dial(s.ctx, host, port)
	if err != nil {
		s.refuse(c, "http", err)
		return false
	}
	if !s.track(up) {
		up.Close()
		return false
	}
	defer s.untrack(up)
	s.connected.Add(1)
	// Hop-by-hop and proxy headers stay here (RFC 9110 7.6.1); the
	// upstream connection serves this one request.
	for _, h := range []string{"Proxy-Connection", "Proxy-Authorization", "Connection", "Keep-Alive", "Te", "Trailer", "Upgrade"} {
		req.Header.Del(h)
	}
	keep := !req.Close // what the tool asked for, before the upstream side is closed
	req.Close = true
	if err := req.Write(up); err != nil {
		reply(c, http.StatusBadGateway, "moat egress: send the request upstream: "+err.Error())
		return false
	}
	resp, err := http.ReadResponse(bufio.NewReader(up), req)
	if err != nil {
		reply(c, http.StatusBadGateway, "moat egress: read the upstream response: "+err.Error())
		return false
	}
	defer resp.Body.Close()
	keep = keep && !resp.Close
	resp.Close = !keep
	if err := resp.Write(c); err != nil {
		return false
	}
	return keep
}

// refuse answers a failed dial: 403 for a denial, 502 otherwise.
func (s *Sandbox) refuse(c net.Conn, proto string, err error) {
	var d *Denial
	if errors.As(err, &d) {
		s.denied(proto, d)
		reply(c, http.StatusForbidden, d.Error())
		return
	}
	s.logger.Debug("egress unreachable", "proto", proto, "err", err)
	reply(c, http.StatusBadGateway, err.Error())
}

// reply writes a complete response with msg as its text body and closes
// the exchange (the tool shows the body: curl with -v or --fail-with-body,
// urllib in its HTTPError).
func reply(c net.Conn, code int, msg string) {
	body := msg + "\n"
	fmt.Fprintf(c, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\nX-Moat-Egress: %s\r\n\r\n%s",
		code, http.StatusText(code), len(body), headerSafe(msg), body)
}

func headerSafe(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, s)
}

// splitHostPort reads host[:port] (port defaults to def; 0: required).
func splitHostPort(hp string, def uint16) (string, uint16, error) {
	host, ps, err := net.SplitHostPort(hp)
	if err != nil {
		if def == 0 || strings.Count(hp, ":") > 0 && !strings.HasSuffix(hp, "]") {
			return "", 0, err
		}
		return strings.Trim(hp, "[]"), def, nil
	}
	n, err := strconv.ParseUint(ps, 10, 16)
	if err != nil || n == 0 {
		return "", 0, fmt.Errorf("port %q out of range", ps)
	}
	if host == "" {
		return "", 0, errors.New("empty host")
	}
	return host, uint16(n), nil
}
