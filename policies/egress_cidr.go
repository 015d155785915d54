package policies

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// CIDRRule is one parsed entry of Egress.CIDRs.
type CIDRRule struct {
	// Prefix is masked ("10.1.2.3/8" is 10.0.0.0/8); one address is a /32
	// or a /128.
	Prefix netip.Prefix
	// Port is 0 for any port.
	Port uint16
}

// Matches reports whether the range admits ip (unmapped) on port.
func (r CIDRRule) Matches(ip netip.Addr, port uint16) bool {
	return (r.Port == 0 || r.Port == port) && r.Prefix.Contains(ip)
}

// String is the canonical form, which parses back to r: "10.0.0.0/8",
// "10.0.0.0/8:443", "[fd00::]/8:443".
func (r CIDRRule) String() string {
	if r.Port == 0 {
		return r.Prefix.String()
	}
	a := r.Prefix.Addr().String()
	if r.Prefix.Addr().Is6() {
		a = "[" + a + "]"
	}
	return a + "/" + strconv.Itoa(r.Prefix.Bits()) + ":" + strconv.Itoa(int(r.Port))
}

func (v *validator) egressCIDRs(cidrs []string) []CIDRRule {
	var out []CIDRRule
	for i, s := range cidrs {
		r, reason := parseCIDRRule(s)
		if reason != "" {
			v.add(fmt.Sprintf("egress.cidrs[%d]", i), s, "%s", reason)
			continue
		}
		out = append(out, r)
	}
	return out
}

const notARange = "is not an IP range; write one like 203.0.113.0/24, 2001:db8::/32 or one address (203.0.113.7), " +
	"with a port after it to admit that port only (203.0.113.0/24:443, [2001:db8::]/32:443); host names go in egress.allow"

// parseCIDRRule reads one entry of Egress.CIDRs, "RANGE" or "RANGE:PORT",
// where a range is ADDR/LEN or one address; a non-empty reason says what is
// wrong. An IPv6 range with a port puts brackets around its address
// ("[2001:db8::]/32:443", "[::1]:8080"), as a URL does (RFC 3986 section
// 3.2.2): only the brackets tell a port from the address's last group,
// "::1:8080" being an address. The one spelling per range keeps a
// near-miss ("[fd00::/8]:443", "fd00::/8:443", "[10.0.0.1]:80") an error
// that shows the right one, rather than a second form to remember.
func parseCIDRRule(s string) (CIDRRule, string) {
	var r CIDRRule
	rng, port, ported, bracketed := s, "", false, false
	if rest, ok := strings.CutPrefix(s, "["); ok {
		inside, after, closed := strings.Cut(rest, "]")
		if !closed {
			return r, "has a '[' without its ']'; an IPv6 range with a port is written [2001:db8::]/32:443"
		}
		if a, bits, ok := strings.Cut(inside, "/"); ok {
			if after == "" {
				return r, fmt.Sprintf("has brackets but no port; brackets are for a port: write %s, or [%s]/%s:PORT to admit one port only", inside, a, bits)
			}
			return r, fmt.Sprintf("has its length inside the brackets; write [%s]/%s%s", a, bits, after)
		}
		var bits string
		bits, port, ported = strings.Cut(after, ":")
		if !ported {
			return r, fmt.Sprintf("has brackets but no port; brackets are for a port: write %s%s, or [%s]%s:PORT to admit one port only", inside, bits, inside, bits)
		}
		if bits != "" && !strings.HasPrefix(bits, "/") {
			return r, notARange
		}
		rng, bracketed = inside+bits, true
	} else if strings.Count(s, ":") == 1 {
		// An IPv4 range and its port: an IPv6 address has two colons at
		// least.
		rng, port, ported = strings.Cut(s, ":")
	} else if a, bits, ok := strings.Cut(s, "/"); ok {
		if n, p, ok := strings.Cut(bits, ":"); ok && isDigits(n) && isIPv6(a) {
			return r, fmt.Sprintf("is an IPv6 range with a port, which takes brackets: write [%s]/%s:%s", a, n, p)
		}
	}
	p, reason := parseRange(rng, ported)
	if reason != "" {
		return r, reason
	}
	if bracketed && !p.Addr().Is6() {
		return r, fmt.Sprintf("has brackets around an IPv4 address; brackets are for IPv6 only: write %s:%s", rng, port)
	}
	r.Prefix = p
	if ported {
		n, err := strconv.ParseUint(port, 10, 16)
		if err != nil || n == 0 {
			return r, "has a port out of range; put a port from 1 to 65535 after the range, as in 10.0.0.0/8:443 or [fd00::]/8:443"
		}
		r.Port = uint16(n)
	}
	return r, ""
}

// parseRange reads ADDR/LEN or one address, masked. ported says a port
// was written apart from it, so a bare IPv6 address cannot be one that
// swallowed it.
func parseRange(s string, ported bool) (netip.Prefix, string) {
	if strings.Contains(s, "%") {
		return netip.Prefix{}, "has an IPv6 zone (%...); a range is the same on every interface: drop the zone"
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		a, aerr := netip.ParseAddr(s)
		if aerr != nil {
			return netip.Prefix{}, notARange
		}
		if !ported && a.Is6() && !a.Is4In6() && ipv4Compatible.Contains(a) && a != netip.IPv6Unspecified() && a != netip.IPv6Loopback() {
			// "::1:8080" for ::1 on port 8080. These addresses are
			// deprecated (RFC 4291 section 2.5.5.1): nobody means one.
			return netip.Prefix{}, "is an IPv4-compatible IPv6 address (::/96, deprecated); an IPv6 address with a port takes brackets, as in [::1]:8080"
		}
		p = netip.PrefixFrom(a, a.BitLen())
	}
	p = p.Masked()
	if p.Addr().Is4In6() && p.Bits() >= 96 {
		// Inside ::ffff:0:0/96. The proxy compares an IPv4 destination as
		// IPv4 (it unmaps ::ffff:a.b.c.d), so this range would never
		// match. (A shorter one, ::ffff:0.0.0.0/0 say, is masked to an
		// IPv6 range like any other.)
		return netip.Prefix{}, fmt.Sprintf("is an IPv4-mapped IPv6 range; write the IPv4 range instead, as in %s", netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96))
	}
	return p, ""
}

var ipv4Compatible = netip.MustParsePrefix("::/96")

func isIPv6(s string) bool {
	a, err := netip.ParseAddr(s)
	return err == nil && a.Is6()
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
