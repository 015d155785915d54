package policies

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"testing"
)

// egressCases are allowlist and range entries of every shape, right and
// nearly right, for FuzzMatchers.
var egressCases = []string{
	"pypi.org", "*.pythonhosted.org:443", "localhost", "LOCALHOST.:8080", "*.localhost", "a.localhost:3000",
	"10.0.0.0/8", "10.1.2.3/8", "127.0.0.1", "127.0.0.1:8080", "127.0.0.1/32:8080", "10.0.0.0/8:443",
	"::1", "2001:db8::/32", "[::1]:8080", "[::1]/128:8080", "[fd00::]/8:443", "[fd00::/8]:443",
	"fd00::/8:443", "[::1]", "[10.0.0.1]:80", "::1:8080", "fe80::1%eth0", "::ffff:10.0.0.0/104", "::ffff:0.0.0.0/0",
	"10.0.0.0/8:0", "10.0.0.0/8:65536", "10.0.0.0:443/8",
}

// checkEgressEntry holds s, as an allowlist entry and as a range, to the
// parsers' promises: what they accept reads back the same from its
// canonical form; a range with a port ends with that port; a range without
// one is what netip reads (the meaning every portless entry had before
// ports), and what netip reads is refused only as a zone, an IPv4-mapped
// range, or a bare IPv4-compatible address (::1:8080: a port, forgotten
// brackets).
func checkEgressEntry(s string) error {
	if r, reason := parseHostRule(s); reason == "" {
		if back, reason := parseHostRule(r.String()); reason != "" || back != r {
			return fmt.Errorf("allow %q is %v, whose form %q reads back as %v (%q)", s, r, r.String(), back, reason)
		}
	}
	old, oldOK := netipRange(s)
	r, reason := parseCIDRRule(s)
	if reason != "" {
		_, bare := netip.ParseAddr(s)
		mapped := old.Addr().Is4In6() && old.Bits() >= 96
		if oldOK && !strings.Contains(s, "%") && !mapped && !(bare == nil && ipv4Compatible.Contains(old.Addr())) {
			return fmt.Errorf("range %q, which netip reads as %v, is refused: %s", s, old, reason)
		}
		return nil
	}
	if !r.Prefix.IsValid() || r.Prefix != r.Prefix.Masked() {
		return fmt.Errorf("range %q is %v, not a masked prefix", s, r.Prefix)
	}
	if back, reason := parseCIDRRule(r.String()); reason != "" || back != r {
		return fmt.Errorf("range %q is %v, whose form %q reads back as %v (%q)", s, r, r.String(), back, reason)
	}
	if r.Port == 0 && (!oldOK || old != r.Prefix) {
		return fmt.Errorf("range %q without a port is %v, and netip reads %v (%v)", s, r.Prefix, old, oldOK)
	}
	if r.Port != 0 {
		n, err := strconv.ParseUint(s[strings.LastIndexByte(s, ':')+1:], 10, 16)
		if err != nil || n != uint64(r.Port) {
			return fmt.Errorf("range %q has the port %d it does not end with", s, r.Port)
		}
	}
	return nil
}

// netipRange is what the portless syntax meant before ports: a prefix or
// one address, masked.
func netipRange(s string) (netip.Prefix, bool) {
	if p, err := netip.ParsePrefix(s); err == nil {
		return p.Masked(), true
	}
	if a, err := netip.ParseAddr(s); err == nil {
		return netip.PrefixFrom(a, a.BitLen()).Masked(), true
	}
	return netip.Prefix{}, false
}

func TestEgressEntriesKeepTheirPromises(t *testing.T) {
	for _, s := range append(egressCases, matcherCases...) {
		if err := checkEgressEntry(s); err != nil {
			t.Error(err)
		}
	}
}
