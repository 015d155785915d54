package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"

	"github.com/moat-sandbox/moat/policies"
)

// Allowlist is a policy's egress section, parsed once.
type Allowlist struct {
	Rules []policies.HostRule
	CIDRs []policies.CIDRRule
}

// NewAllowlist parses e; its errors are the policy's field errors.
func NewAllowlist(e *policies.Egress) (*Allowlist, error) {
	rules, cidrs, err := e.Rules()
	if err != nil {
		return nil, fmt.Errorf("egress: %w", err)
	}
	return &Allowlist{Rules: rules, CIDRs: cidrs}, nil
}

// inRange reports whether a range admits ip on port.
func (a *Allowlist) inRange(ip netip.Addr, port uint16) bool {
	for _, r := range a.CIDRs {
		if r.Matches(ip, port) {
			return true
		}
	}
	return false
}

// rangePorts lists the ports the ranges that contain ip admit it on, for
// a denial's reason; nil when ip is in no range.
func (a *Allowlist) rangePorts(ip netip.Addr) []string {
	var ports []string
	for _, r := range a.CIDRs {
		if r.Prefix.Contains(ip) {
			ports = append(ports, strconv.Itoa(int(r.Port)))
		}
	}
	return ports
}

// Denial is a destination the policy does not allow; the proxy tells the
// tool its Reason (HTTP 403, SOCKS reply 2).
type Denial struct {
	Host   string
	Port   uint16
	Reason string
}

func (d *Denial) Error() string {
	return fmt.Sprintf("moat egress denied %s: %s", net.JoinHostPort(d.Host, strconv.Itoa(int(d.Port))), d.Reason)
}

// UnreachableError is an allowed destination that could not be resolved or
// connected to (HTTP 502, SOCKS reply 4 or 5).
type UnreachableError struct {
	Host    string
	Port    uint16
	Resolve bool // the name did not resolve
	Err     error
}

func (e *UnreachableError) Error() string {
	what := "connect to"
	if e.Resolve {
		what = "resolve"
	}
	return fmt.Sprintf("moat egress: %s %s: %v", what, net.JoinHostPort(e.Host, strconv.Itoa(int(e.Port))), e.Err)
}

func (e *UnreachableError) Unwrap() error { return e.Err }

// special are the ranges that are never a public destination, beyond what
// netip's predicates name: refused unless an egress range names them.
var special = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),       // "this network" (RFC 791); 0.0.0.0 reaches the host
	netip.MustParsePrefix("100.64.0.0/10"),   // carrier-grade NAT (RFC 6598)
	netip.MustParsePrefix("192.0.0.0/24"),    // IETF protocol assignments (RFC 6890)
	netip.MustParsePrefix("198.18.0.0/15"),   // benchmarking (RFC 2544)
	netip.MustParsePrefix("240.0.0.0/4"),     // reserved, and broadcast
	netip.MustParsePrefix("::/96"),           // IPv4-compatible (RFC 4291, deprecated): ::127.0.0.1 routes over sit
	netip.MustParsePrefix("::ffff:0:0:0/96"), // SIIT IPv4-translated (RFC 2765): embeds an IPv4 address
	netip.MustParsePrefix("64:ff9b::/96"),    // NAT64 (RFC 6052): reaches any IPv4 address, private ones too
	netip.MustParsePrefix("64:ff9b:1::/48"),  // local-use NAT64 (RFC 8215)
	netip.MustParsePrefix("2002::/16"),       // 6to4 (RFC 3056): embeds an IPv4 address
	netip.MustParsePrefix("2001::/32"),       // Teredo (RFC 4380): embeds one too
	netip.MustParsePrefix("fec0::/10"),       // deprecated site-local
	netip.MustParsePrefix("100::/64"),        // discard-only (RFC 6666)
	netip.MustParsePrefix("2001:db8::/32"),   // documentation
	netip.MustParsePrefix("192.0.2.0/24"),    // documentation
	netip.MustParsePrefix("198.51.100.0/24"), // documentation
	netip.MustParsePrefix("203.0.113.0/24"),  // documentation
}

// forbidden says why ip is not a public destination, or "" when it is.
func forbidden(ip netip.Addr, own []netip.Addr) string {
	switch {
	case ip.IsLoopback():
		return "loopback"
	case ip.IsLinkLocalUnicast(), ip.IsLinkLocalMulticast():
		return "link-local"
	case ip.IsPrivate():
		return "private"
	case ip.IsUnspecified(), ip.IsMulticast(), ip.IsInterfaceLocalMulticast(), !ip.IsGlobalUnicast():
		return "not a unicast address"
	}
	for _, p := range special {
		if p.Contains(ip) {
			return "a special-purpose address (" + p.String() + ")"
		}
	}
	for _, a := range own {
		if a == ip {
			return "one of this host's own addresses"
		}
	}
	return ""
}

// dial checks host:port against the sandbox's allowlist, resolves it on
// the host, and connects to the first address the policy allows. It
// returns a *Denial or an *UnreachableError.
func (s *Sandbox) dial(ctx context.Context, host string, port uint16) (net.Conn, error) {
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	deny := func(format string, args ...any) (net.Conn, error) {
		return nil, &Denial{Host: host, Port: port, Reason: fmt.Sprintf(format, args...)}
	}
	if port == 0 {
		return deny("port 0 is not a destination")
	}
	var addrs []netip.Addr
	if ip, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		ip = ip.Unmap()
		if !s.allow.inRange(ip, port) {
			if ports := s.allow.rangePorts(ip); ports != nil {
				return deny("a raw IP address is allowed only inside the policy's egress.cidrs, which admit %s on port %s only", ip, strings.Join(ports, ", "))
			}
			return deny("a raw IP address is allowed only inside the policy's egress.cidrs, and %s is not", ip)
		}
		addrs = []netip.Addr{ip}
	} else {
		if !plainName(host) {
			return deny("not a host name: only letters, digits, '-', '_' and '.', in non-empty labels, are matched against the allowlist")
		}
		if !s.allowed(host, port) {
			return deny("%s is not on the policy's egress allowlist (add it to egress.allow, or moat run --allow-host %s)", host, net.JoinHostPort(host, strconv.Itoa(int(port))))
		}
		if policies.IsLocalhost(host) {
			addrs = s.loopback(port)
			if len(addrs) == 0 {
				return deny("%s is the host's loopback, which no entry of egress.cidrs admits on port %d (add 127.0.0.1/32:%d, or moat run --allow-cidr 127.0.0.1/32:%d)", host, port, port, port)
			}
		} else if addrs, err = s.resolve(ctx, host, port); err != nil {
			return nil, err
		}
	}
	d := net.Dialer{Timeout: s.proxy.dialTimeout}
	var errs []error
	for _, ip := range addrs {
		c, err := d.DialContext(ctx, "tcp", netip.AddrPortFrom(ip, port).String())
		if err == nil {
			return c, nil
		}
		errs = append(errs, err)
	}
	return nil, &UnreachableError{Host: host, Port: port, Err: errors.Join(errs...)}
}

// loopback is what a localhost name stands for on port: the loopback
// addresses a range admits there. localhost is never looked up (RFC 6761
// section 6.3; draft-ietf-dnsop-let-localhost-be-localhost makes it a
// MUST). Looking it up is what failed before: resolve asks for the rooted
// name, and Go's resolver keys the hosts file's one-label names without a
// dot (absDomainName in net/dnsclient.go roots only names that have one),
// so "localhost." misses the file's "localhost" and goes to the DNS
// server (glibc's files source, through cgo, misses it as well); the
// answer was a 502, and the name had left the host. The policy check
// refuses a localhost rule without a range for its port, so only an
// Allowlist built by hand gets an empty result here, which dial denies.
func (s *Sandbox) loopback(port uint16) []netip.Addr {
	var addrs []netip.Addr
	for _, ip := range policies.LocalhostAddrs() {
		if s.allow.inRange(ip, port) {
			addrs = append(addrs, ip)
		}
	}
	return addrs
}

// resolve looks an allowed name up on the host and keeps the addresses
// the policy lets it reach: public ones, and the others only where a range
// admits them on port.
func (s *Sandbox) resolve(ctx context.Context, host string, port uint16) ([]netip.Addr, error) {
	p := s.proxy
	deny := func(format string, args ...any) ([]netip.Addr, error) {
		return nil, &Denial{Host: host, Port: port, Reason: fmt.Sprintf(format, args...)}
	}
	// Rooted, so resolv.conf's search domains never turn the checked
	// name into another (x.example.com into x.example.com.corp.lan).
	found, err := p.resolver.LookupNetIP(ctx, "ip", host+".")
	if err != nil || len(found) == 0 {
		if err == nil {
			err = errors.New("no address")
		}
		return nil, &UnreachableError{Host: host, Port: port, Resolve: true, Err: err}
	}
	own, err := p.hostAddrs()
	if err != nil {
		// Fail closed: without the list, one of them could pass.
		return deny("this host's own addresses cannot be listed to rule them out: %v", err)
	}
	var addrs []netip.Addr
	var why []string
	for _, ip := range found {
		ip = ip.Unmap()
		if s.allow.inRange(ip, port) {
			addrs = append(addrs, ip)
		} else if r := forbidden(ip, own); r == "" {
			addrs = append(addrs, ip)
		} else if ports := s.allow.rangePorts(ip); ports != nil {
			why = append(why, fmt.Sprintf("%s is %s, and egress.cidrs admits it on port %s only", ip, r, strings.Join(ports, ", ")))
		} else {
			why = append(why, ip.String()+" is "+r)
		}
	}
	if len(addrs) == 0 {
		return deny("it resolves only to addresses the proxy refuses unless egress.cidrs names them (%s)", strings.Join(why, "; "))
	}
	return addrs, nil
}

func (s *Sandbox) allowed(host string, port uint16) bool {
	for _, r := range s.allow.Rules {
		if r.Matches(host, port) {
			return true
		}
	}
	return false
}

// plainName reports whether host holds only what a policy's names can:
// a name with a NUL, a space or a percent sign, or an empty label
// ("a..b", "localhost.." once one dot is trimmed), matches no rule, and
// must not reach the resolver as one that might.
func plainName(host string) bool {
	if host == "" || len(host) > 253 || host[0] == '.' || host[len(host)-1] == '.' || strings.Contains(host, "..") {
		return false
	}
	for _, c := range host {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}
