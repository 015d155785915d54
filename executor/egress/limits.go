package egress

import (
	"fmt"
	"time"
)

// What bounds the proxy's memory. The proxy runs in the host process,
// outside every limit of the sandboxes it serves, and one proxy serves
// every sandbox of a library provider: what a tool (or a server on an
// allowed name) can make it hold must be bounded by the proxy, not by the
// tool's good manners.
//
// A connection holds, at most: the 4 KiB bufio.Reader of its tool's side
// and, for a plain request, one of its upstream's (both pooled); two
// goroutines' stacks; and while a head is read, the head and its parse.
// The parse costs more than the bytes: textproto keeps the line, the
// values and a map entry per key, and a head of many tiny fields
// ("a1:\r\n", "a2:\r\n", ...) holds about 20 times its size (measured:
// 1.2 MB for 64 KiB). So a head is capped in lines (maxHeadLines) as
// well as in bytes (MaxHeaderBytes); so capped, the worst head allocates
// about 5 times its cap while parsed (a request line of the whole cap:
// textproto's line grows by doubling, then the URI is copied into the
// URL's fields) and keeps under 3 times that. The request is dropped
// once sent upstream, before the response head is read, so a connection
// parses one head at a time. Per connection, then:
//
//	5 × MaxHeaderBytes + about 24 KiB  (344 KiB with the default 64 KiB)
//
// and the proxy's connections are capped across sandboxes
// (MaxTotalConns), so all of them together hold at most
//
//	MaxTotalConns × that  (512 × 344 KiB ≈ 172 MiB with the defaults)
//
// in the worst case, where every connection of every sandbox is in the
// middle of a maximal head; a tunnel's bytes are spliced in the kernel
// and a body streams through the 4 KiB buffers. TestHeadMemoryIsBounded
// measures the per-connection figure.
//
// Time bounds every wait, so a slow or silent peer holds a slot of the
// caps for a bounded while: the tool's head (HeadTimeout, from the first
// byte awaited to the last, not renewed by a trickle), the connect
// (DialTimeout), the upstream's response head (ResponseHeaderTimeout,
// likewise), and everything after the heads, a tunnel's or a body's bytes
// either way, as long as they keep moving (IdleTimeout, idle.go).

// Defaults of the limits.
const (
	// DefaultMaxTotalConns caps the connections open at once across all
	// the sandboxes of a proxy: eight sandboxes at their own cap.
	DefaultMaxTotalConns = 512
	// DefaultMaxHeaderBytes caps a request head (request line included)
	// and an upstream response head: Squid's request_header_max_size and
	// reply_header_max_size, 64 KB. Tools send a few hundred bytes; Go's
	// server allows 1 MiB, which across a proxy's connections is too much.
	DefaultMaxHeaderBytes = 64 << 10
	// DefaultHeadTimeout bounds the wait for a tool's request head or
	// SOCKS5 handshake, and a keep-alive connection's wait for its next
	// request.
	DefaultHeadTimeout = 30 * time.Second
	// DefaultResponseHeaderTimeout bounds the wait for an upstream's
	// response head: nginx's proxy_read_timeout, 60 s.
	DefaultResponseHeaderTimeout = 60 * time.Second
	// DefaultIdleTimeout ends a tunnel or an exchange in which no byte
	// moved for this long: Squid's read_timeout, 15 min. Long enough for
	// a long poll or a quiet session with keepalives; a slot nobody uses
	// comes back.
	DefaultIdleTimeout = 15 * time.Minute

	// maxHeadLines caps a head's lines, its start line and fields
	// together (continuation lines count): Apache's LimitRequestFields is
	// 100; 256 leaves room for responses heavy with Set-Cookie.
	maxHeadLines = 256
	// minHeaderBytes is the least WithMaxHeaderBytes takes: a
	// bufio.Reader's 4 KiB, which may hold a pipelined head's first bytes
	// before it begins (headReader.begin).
	minHeaderBytes = 4 << 10
)

// limits are a proxy's bounds, set by the options of New.
type limits struct {
	maxTotalConns         int
	maxHeaderBytes        int
	headTimeout           time.Duration
	responseHeaderTimeout time.Duration
	idleTimeout           time.Duration
}

var defaultLimits = limits{
	maxTotalConns:         DefaultMaxTotalConns,
	maxHeaderBytes:        DefaultMaxHeaderBytes,
	headTimeout:           DefaultHeadTimeout,
	responseHeaderTimeout: DefaultResponseHeaderTimeout,
	idleTimeout:           DefaultIdleTimeout,
}

func (l *limits) check() error {
	if l.maxTotalConns <= 0 {
		return fmt.Errorf("egress: total connection cap %d (WithMaxTotalConns): use a positive number", l.maxTotalConns)
	}
	if l.maxHeaderBytes < minHeaderBytes {
		return fmt.Errorf("egress: head cap %d bytes (WithMaxHeaderBytes): use at least %d", l.maxHeaderBytes, minHeaderBytes)
	}
	for _, t := range []struct {
		name string
		d    time.Duration
	}{{"WithHeadTimeout", l.headTimeout}, {"WithResponseHeaderTimeout", l.responseHeaderTimeout}, {"WithIdleTimeout", l.idleTimeout}} {
		if t.d <= 0 {
			return fmt.Errorf("egress: %s(%v): use a positive duration", t.name, t.d)
		}
	}
	return nil
}
