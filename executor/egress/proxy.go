// Package egress is moat's host-side filtering proxy: a sandbox reaches the
// hosts its policy's egress section names, and nothing else.
//
// The sandbox's network namespace has no route out; only lo is up. Each
// sandbox gets a unix socket of its own (Proxy.Open), which the provider
// binds into the sandbox, and a forwarder in the sandbox's init relays
// connections from a loopback port to it; the tool finds that port in the
// usual proxy environment variables (Env). On the socket the proxy speaks
// HTTP CONNECT (TLS passes through untouched), plain HTTP with an absolute
// URI, and SOCKS5 with host names. It resolves names itself, on the host,
// and connects only to an address it checked (allow.go says which), so a
// name that resolves differently a moment later (DNS rebinding) changes
// nothing.
//
// One Proxy serves every sandbox of a process; each Sandbox has its own
// allowlist, counters (Usage) and connection cap, so one tool that floods
// its socket does not starve the others, and the proxy caps its
// connections across sandboxes (limits.go says what bounds its memory).
package egress

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/moat-sandbox/moat/nsexec/hostpath"
	"golang.org/x/sys/unix"
)

// Defaults.
const (
	// DefaultMaxConns is how many connections one sandbox may hold open
	// through the proxy at once.
	DefaultMaxConns = 64
	// DefaultDialTimeout bounds one connect to a destination.
	DefaultDialTimeout = 10 * time.Second
)

// Resolver looks names up; *net.Resolver is one. Tests pass their own
// (WithResolver) to map names to local servers.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// sockName spells a socket's 128 random bits in 26 characters: the whole
// path must fit in a unix socket address.
var sockName = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// Proxy is the process's one filtering proxy. Its zero value is not
// usable; call New.
type Proxy struct {
	dir         string
	ownDir      bool
	lock        int // the socket directory's lock (sweep.go), when ownDir
	resolver    Resolver
	logger      *slog.Logger
	maxConns    int
	dialTimeout time.Duration
	hostAddrs   func() ([]netip.Addr, error)
	limits

	// conns counts the open connections of every sandbox, against
	// limits.maxTotalConns.
	conns      atomic.Int64
	lastCapLog atomic.Int64

	mu     sync.Mutex
	open   map[*Sandbox]struct{}
	closed bool
}

// Option configures a Proxy.
type Option func(*Proxy)

// WithResolver replaces the host's resolver (for tests: names mapped to
// local servers).
func WithResolver(r Resolver) Option { return func(p *Proxy) { p.resolver = r } }

// WithLogger receives a line per denial (default: discarded).
func WithLogger(l *slog.Logger) Option { return func(p *Proxy) { p.logger = l } }

// WithMaxConns sets the per-sandbox cap on open connections (default
// DefaultMaxConns).
func WithMaxConns(n int) Option { return func(p *Proxy) { p.maxConns = n } }

// WithDialTimeout bounds each connect to a destination (default
// DefaultDialTimeout).
func WithDialTimeout(d time.Duration) Option { return func(p *Proxy) { p.dialTimeout = d } }

// WithMaxTotalConns caps the connections open at once across all the
// proxy's sandboxes (default DefaultMaxTotalConns); beyond it a
// connection is closed at once and counted as its sandbox's denial. With
// the per-connection bound (limits.go), it bounds the proxy's memory.
func WithMaxTotalConns(n int) Option { return func(p *Proxy) { p.maxTotalConns = n } }

// WithMaxHeaderBytes caps a request head, request line included, and an
// upstream response head (default DefaultMaxHeaderBytes; at least 4 KiB).
func WithMaxHeaderBytes(n int) Option { return func(p *Proxy) { p.maxHeaderBytes = n } }

// WithHeadTimeout bounds the wait for a tool's request head or SOCKS5
// greeting and request, from the first byte awaited to the last
// (default DefaultHeadTimeout).
func WithHeadTimeout(d time.Duration) Option { return func(p *Proxy) { p.headTimeout = d } }

// WithResponseHeaderTimeout bounds the wait for an upstream's response
// head to a plain HTTP request, from the request sent to the head's last
// byte (default DefaultResponseHeaderTimeout).
func WithResponseHeaderTimeout(d time.Duration) Option {
	return func(p *Proxy) { p.responseHeaderTimeout = d }
}

// WithIdleTimeout closes a tunnel or a plain request's exchange once no
// byte has moved either way for d (default DefaultIdleTimeout).
func WithIdleTimeout(d time.Duration) Option { return func(p *Proxy) { p.idleTimeout = d } }

// WithDir puts the sandboxes' sockets in dir, a directory nobody else may
// list or write (0700 or 0711); by default New creates one (0711) under
// os.TempDir() and Close removes it.
func WithDir(dir string) Option { return func(p *Proxy) { p.dir = dir } }

// New starts a proxy. It listens on nothing until Open.
func New(opts ...Option) (*Proxy, error) {
	p := &Proxy{resolver: net.DefaultResolver, maxConns: DefaultMaxConns, dialTimeout: DefaultDialTimeout,
		hostAddrs: (&addrCache{}).get, open: map[*Sandbox]struct{}{}, limits: defaultLimits}
	for _, o := range opts {
		o(p)
	}
	if p.logger == nil {
		p.logger = slog.New(slog.DiscardHandler)
	}
	if p.maxConns <= 0 {
		return nil, fmt.Errorf("egress: connection cap %d: use a positive number", p.maxConns)
	}
	if p.dialTimeout <= 0 {
		return nil, fmt.Errorf("egress: dial timeout %v: use a positive duration", p.dialTimeout)
	}
	if err := p.limits.check(); err != nil {
		return nil, err
	}
	if p.dir == "" {
		sweep(os.TempDir(), p.logger)
		dir, err := os.MkdirTemp("", dirPrefix)
		if err == nil {
			if p.lock, err = lockDir(dir); err == nil {
				err = os.Chmod(dir, 0o711)
			}
			if err != nil {
				os.RemoveAll(dir)
			}
		}
		if err != nil {
			return nil, fmt.Errorf("egress: create the socket directory: %w", err)
		}
		p.dir, p.ownDir = dir, true
	} else if err := checkDir(p.dir); err != nil {
		return nil, err
	}
	return p, nil
}

// checkDir refuses a socket directory that others could list or write: a
// socket in it is a door to every allowed host. The directory is resolved
// by the rule of nsexec/hostpath: a symlink on the way, the last component
// included, is followed only if root or the caller could have planted it
// (a Lstat of the last component let another user's link higher up lead
// to a directory of theirs, or their link to one of the caller's); a
// refused one is a *hostpath.LinkError.
func checkDir(dir string) error {
	fd, _, err := hostpath.Open(dir, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return fmt.Errorf("egress: socket directory: %w", err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("egress: socket directory %s: %w", dir, err)
	}
	if st.Mode&0o066 != 0 {
		return fmt.Errorf("egress: socket directory %s must be a real directory with mode 0700 or 0711 (it is %#o)", dir, st.Mode&0o7777)
	}
	// Its owner could list the sockets or swap one for its own and read a
	// sandbox's plain HTTP: it must be this process's user.
	if int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("egress: socket directory %s must be owned by this process's user (uid %d)", dir, os.Geteuid())
	}
	return nil
}

// Open gives one sandbox its socket, serving allow. attrs go on every log
// line of this sandbox (the tool's name, say). Close the Sandbox when the
// sandbox is gone.
func (p *Proxy) Open(allow *Allowlist, attrs ...any) (*Sandbox, error) {
	if allow == nil {
		return nil, errors.New("egress: open a sandbox: no allowlist")
	}
	var name [16]byte
	rand.Read(name[:])
	path := filepath.Join(p.dir, sockName.EncodeToString(name[:]))
	if len(path) >= len(unix.RawSockaddrUnix{}.Path) {
		return nil, fmt.Errorf("egress: the socket path %s is longer than a unix socket address holds (%d bytes); use a shorter TMPDIR or WithDir", path, len(unix.RawSockaddrUnix{}.Path)-1)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("egress: listen: %w", err)
	}
	ln.SetUnlinkOnClose(true)
	// The sandbox runs as another host id than this process (root's
	// sandboxes), which must open the socket to bind it and connect to it:
	// the directory is 0711, so no other sandbox can list it, and inside a
	// sandbox only its own socket is bound. A user of the host itself can
	// still learn the name from /proc/net/unix and connect: serve refuses
	// a peer that is neither this process's user nor one the sandbox's
	// owner admitted (Sandbox.Admit).
	if err := os.Chmod(path, 0o666); err != nil {
		ln.Close()
		return nil, fmt.Errorf("egress: chmod the socket: %w", err)
	}
	return p.start(allow, ln, path, attrs)
}

// start serves allow on ln, a listener of Open or OpenLoopback.
func (p *Proxy) start(allow *Allowlist, ln net.Listener, path string, attrs []any) (*Sandbox, error) {
	s := &Sandbox{proxy: p, allow: allow, ln: ln, path: path, logger: p.logger.With(attrs...),
		sem: make(chan struct{}, p.maxConns), conns: map[net.Conn]struct{}{}}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		ln.Close()
		return nil, errors.New("egress: open a sandbox: the proxy is closed")
	}
	p.open[s] = struct{}{}
	p.mu.Unlock()
	s.wg.Add(1)
	go s.serve()
	return s, nil
}

// Dir is the directory of the sandboxes' sockets.
func (p *Proxy) Dir() string { return p.dir }

// Close closes every sandbox's socket and connections, and removes the
// socket directory New created.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	open := make([]*Sandbox, 0, len(p.open))
	for s := range p.open {
		open = append(open, s)
	}
	p.mu.Unlock()
	for _, s := range open {
		s.Close()
	}
	if p.ownDir {
		err := os.RemoveAll(p.dir)
		unix.Close(p.lock) // after the removal: a sweep never sees it free and half gone
		return err
	}
	return nil
}

// addrCache keeps the host's own addresses for a second: listing them is
// a netlink round trip, about a tenth of a proxied request's cost, and
// interfaces seldom change (the refusal of private and loopback ranges
// does not depend on it).
type addrCache struct {
	mu    sync.Mutex
	at    time.Time
	addrs []netip.Addr
}

func (c *addrCache) get() ([]netip.Addr, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.addrs != nil && time.Since(c.at) < time.Second {
		return c.addrs, nil
	}
	addrs, err := interfaceAddrs()
	if err != nil {
		return nil, err
	}
	c.addrs, c.at = addrs, time.Now()
	return addrs, nil
}

// interfaceAddrs lists the host's own addresses.
func interfaceAddrs() ([]netip.Addr, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, err
	}
	out := make([]netip.Addr, 0, len(addrs))
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok {
				out = append(out, ip.Unmap())
			}
		}
	}
	return out, nil
}
