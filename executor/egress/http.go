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
// absolute http:// URI, forwarded one per connection upstream. handle
// began the first head in h; each next one begins here.
func (s *Sandbox) http(c net.Conn, br *bufio.Reader, h *headReader) {
	p := s.proxy
	for {
		req, err := http.ReadRequest(br)
		if err == nil && h.over() {
			err = errHeadTooLarge
		}
		if err != nil {
			s.badHead(c, h, h.cause(err))
			return
		}
		h.end()
		if req.Method == http.MethodConnect {
			s.connect(c, br, req)
			return
		}
		if !s.forward(c, req) {
			return
		}
		ahead, _ := br.Peek(br.Buffered())
		h.begin(p.maxHeaderBytes, ahead)
		c.SetReadDeadline(time.Now().Add(p.headTimeout))
	}
}

// badHead answers a request head that could not be read.
func (s *Sandbox) badHead(c net.Conn, h *headReader, err error) {
	p := s.proxy
	var ne net.Error
	switch {
	case errors.Is(err, errHeadTooLarge) && h.lineTooLong():
		s.tooLarge("a request line")
		s.reply(c, http.StatusRequestURITooLong, fmt.Sprintf("moat egress: the request line is longer than the proxy's limit of %d bytes", p.maxHeaderBytes))
	case errors.Is(err, errHeadTooLarge):
		s.tooLarge("a request head")
		s.reply(c, http.StatusRequestHeaderFieldsTooLarge, fmt.Sprintf("moat egress: the request head is over the proxy's limit of %d bytes or %d lines", p.maxHeaderBytes, maxHeadLines))
	case errors.As(err, &ne) && ne.Timeout():
		// Silent on a keep-alive connection the tool left idle: a 408
		// there could race the tool's next request.
		if h.started() {
			s.reply(c, http.StatusRequestTimeout, fmt.Sprintf("moat egress: the request head did not arrive within %v", p.headTimeout))
		}
	case errors.Is(err, io.EOF), errors.Is(err, net.ErrClosed):
	default:
		s.reply(c, http.StatusBadRequest, "moat egress: not an HTTP proxy request: "+err.Error())
	}
}

// connect opens the tunnel of a CONNECT request.
func (s *Sandbox) connect(c net.Conn, br *bufio.Reader, req *http.Request) {
	host, port, err := splitHostPort(req.Host, 0)
	if err != nil {
		s.reply(c, http.StatusBadRequest, "moat egress: CONNECT needs host:port: "+err.Error())
		return
	}
	up, err := s.dial(s.ctx, host, port)
	if err != nil {
		s.refuse(c, "connect", err)
		return
	}
	s.connected.Add(1)
	if s.answer(c, []byte("HTTP/1.1 200 Connection established\r\n\r\n")) != nil {
		up.Close()
		return
	}
	s.relay(c, br, up)
}

// forward sends one plain request to its destination and its response
// back; false when the connection is done.
func (s *Sandbox) forward(c net.Conn, req *http.Request) bool {
	p := s.proxy
	if req.URL.Scheme != "http" || req.URL.Host == "" {
		s.reply(c, http.StatusBadRequest, "moat egress: a plain HTTP request through the proxy needs an absolute http:// URI; use CONNECT (https_proxy) for TLS")
		return false
	}
	host, port, err := splitHostPort(req.URL.Host, 80)
	if err != nil {
		s.reply(c, http.StatusBadRequest, "moat egress: bad host in the URI: "+err.Error())
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
	// From here the bodies stream both ways, as long as they move.
	c.SetDeadline(time.Time{})
	defer watchIdle(c, up, p.idleTimeout, s.logger).stop()
	// Hop-by-hop and proxy headers stay here (RFC 9110 7.6.1); the
	// upstream connection serves this one request.
	for _, h := range []string{"Proxy-Connection", "Proxy-Authorization", "Connection", "Keep-Alive", "Te", "Trailer", "Upgrade"} {
		req.Header.Del(h)
	}
	keep := !req.Close // what the tool asked for, before the upstream side is closed
	req.Close = true
	// A tool that expects 100-continue (curl, for a body over 1 KiB) waits
	// for it before it sends the body, and req.Write waits for the body:
	// the proxy says 100 itself, the upstream server is not asked (RFC
	// 9110 10.1.1 lets a proxy answer the expectation), and the request
	// goes up whole, so its head is garbage before the response's is read
	// (one head a connection, as limits.go counts).
	if strings.EqualFold(req.Header.Get("Expect"), "100-continue") {
		req.Header.Del("Expect")
		err := s.answer(c, []byte("HTTP/1.1 100 Continue\r\n\r\n"))
		c.SetWriteDeadline(time.Time{})
		if err != nil {
			return false
		}
	}
	if err := req.Write(up); err != nil {
		s.reply(c, http.StatusBadGateway, "moat egress: send the request upstream: "+err.Error())
		return false
	}
	// req is not used past here, so its head is garbage while the
	// response's is read (limits.go counts one head a connection).
	resp, err := s.readResponse(up, &http.Request{Method: req.Method}, func(interim *http.Response) error {
		err := s.answer(c, interimHead(interim))
		c.SetWriteDeadline(time.Time{}) // the body streams as long as it moves (watchIdle)
		return err
	})
	if err != nil {
		s.logger.Debug("egress: a bad response head", "host", host, "err", err)
		s.reply(c, http.StatusBadGateway, err.Error())
		return false
	}
	defer resp.Body.Close()
	keep = keep && !resp.Close
	resp.Close = !keep
	if err := resp.Write(c); err != nil {
		up.Close() // first: the body's Close would read the rest to its end
		return false
	}
	return keep
}

// maxInterim bounds the interim (1xx) responses forwarded before the final
// one: a server that sends them without end must not hold the connection.
const maxInterim = 8

// readResponse reads the response head of req from up, in at most the
// proxy's head bytes and lines and within its response header timeout.
// An interim response (1xx but 101, which cannot come: Upgrade is not
// forwarded) goes to interim as it comes, each one within the same bounds,
// and the final one is returned (RFC 9110 15.2: a proxy forwards 100
// Continue, which curl waits for before it sends a POST's body, and then
// the final response: on main the 100 was taken for the whole answer).
// The body then streams through the same pooled reader, given back when
// the body is closed.
func (s *Sandbox) readResponse(up net.Conn, req *http.Request, interim func(*http.Response) error) (*http.Response, error) {
	p := s.proxy
	h := &headReader{r: up}
	br := newReader(h)
	var resp *http.Response
	var err error
	for n := 0; ; n++ {
		h.begin(p.maxHeaderBytes, nil)
		up.SetReadDeadline(time.Now().Add(p.responseHeaderTimeout))
		resp, err = http.ReadResponse(br, req)
		h.end()
		up.SetReadDeadline(time.Time{})
		if err == nil && h.over() {
			err = errHeadTooLarge
		}
		if err != nil || resp.StatusCode < 100 || resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
			break
		}
		if n == maxInterim {
			err = fmt.Errorf("moat egress: %s sent more than %d interim (1xx) responses", up.RemoteAddr(), maxInterim)
			freeReader(br)
			return nil, err
		}
		if err = interim(resp); err != nil {
			freeReader(br)
			return nil, err
		}
	}
	if err != nil {
		err = h.cause(err)
	}
	var ne net.Error
	switch {
	case err == nil:
		resp.Body = &freeOnClose{ReadCloser: resp.Body, br: br}
		return resp, nil
	case errors.Is(err, errHeadTooLarge):
		err = fmt.Errorf("moat egress: the response head from %s is over the proxy's limit of %d bytes or %d lines", up.RemoteAddr(), p.maxHeaderBytes, maxHeadLines)
	case errors.As(err, &ne) && ne.Timeout():
		err = fmt.Errorf("moat egress: %s sent no complete response head within %v", up.RemoteAddr(), p.responseHeaderTimeout)
	default:
		err = fmt.Errorf("moat egress: read the upstream response: %w", err)
	}
	freeReader(br)
	return nil, err
}

// interimHead is the head of an interim response as the tool gets it: its
// status line and fields, with no body (RFC 9110 15.2).
func interimHead(r *http.Response) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "HTTP/%d.%d %03d %s\r\n", r.ProtoMajor, r.ProtoMinor, r.StatusCode, http.StatusText(r.StatusCode))
	r.Header.Write(&b)
	b.WriteString("\r\n")
	return []byte(b.String())
}

// freeOnClose returns a response's reader to the pool when its body is
// closed: the body reads through it until then.
type freeOnClose struct {
	io.ReadCloser
	br *bufio.Reader
}

func (f *freeOnClose) Close() error {
	err := f.ReadCloser.Close()
	if f.br != nil {
		freeReader(f.br)
		f.br = nil
	}
	return err
}

// refuse answers a failed dial: 403 for a denial, 502 otherwise.
func (s *Sandbox) refuse(c net.Conn, proto string, err error) {
	var d *Denial
	if errors.As(err, &d) {
		s.denied(proto, d)
		s.reply(c, http.StatusForbidden, d.Error())
		return
	}
	s.logger.Debug("egress unreachable", "proto", proto, "err", err)
	s.reply(c, http.StatusBadGateway, err.Error())
}

// reply writes a complete response with msg as its text body and closes
// the exchange (the tool shows the body: curl with -v or --fail-with-body,
// urllib in its HTTPError).
func (s *Sandbox) reply(c net.Conn, code int, msg string) {
	body := msg + "\n"
	s.answer(c, fmt.Appendf(nil, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\nX-Moat-Egress: %s\r\n\r\n%s",
		code, http.StatusText(code), len(body), headerSafe(msg), body))
}

// answer writes the proxy's own reply to the tool, which has the head
// timeout to take it: a tool that reads nothing must not hold the
// connection on a full socket buffer.
func (s *Sandbox) answer(c net.Conn, b []byte) error {
	c.SetWriteDeadline(time.Now().Add(s.proxy.headTimeout))
	_, err := c.Write(b)
	return err
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
