package policies

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// Egress is the network a sandbox may reach through moat's host-side
// filtering proxy (package executor/egress); deny is the default. With an
// egress section the sandbox still has no route out: only lo is up, and the
// tool reaches the proxy through the usual proxy environment variables.
type Egress struct {
	// Allow lists destinations as "NAME" or "NAME:PORT": an exact host name
	// ("pypi.org") or a wildcard for every name below a domain
	// ("*.pythonhosted.org", which does not match pythonhosted.org itself).
	// No port means any port. "localhost" and the names below it are the
	// host's loopback, never looked up (IsLocalhost), and need a range in
	// CIDRs that admits it.
	Allow []string `json:"allow,omitempty"`
	// CIDRs are IP ranges, each with an optional port ("203.0.113.0/24",
	// "127.0.0.1/32:8080", "[::1]/128:8080"; egress_cidr.go), the tool may
	// name as raw addresses, and that an allowed name may resolve to even
	// when they are loopback, link-local, private or the host's own: the
	// proxy refuses such addresses unless a range here names them (DNS
	// rebinding). A range with a port admits that port only.
	CIDRs []string `json:"cidrs,omitempty"`
}

// HostRule is one parsed entry of Egress.Allow.
type HostRule struct {
	// Name is lower-case without a trailing dot; for a wildcard it is the
	// domain after "*." and Wildcard is set.
	Name     string
	Wildcard bool
	// Port is 0 for any port.
	Port uint16
}

// Matches reports whether the rule allows host (lower-case, no trailing
// dot) on port.
func (r HostRule) Matches(host string, port uint16) bool {
	if r.Port != 0 && r.Port != port {
		return false
	}
	if r.Wildcard {
		return strings.HasSuffix(host, "."+r.Name)
	}
	return host == r.Name
}

func (r HostRule) String() string {
	s := r.Name
	if r.Wildcard {
		s = "*." + s
	}
	if r.Port != 0 {
		s += ":" + strconv.Itoa(int(r.Port))
	}
	return s
}

// IsLocalhost reports whether name (lower-case, no trailing dot) is
// "localhost" or a name below it. RFC 6761 section 6.3 reserves them for
// the loopback and asks resolvers not to send them to DNS;
// draft-ietf-dnsop-let-localhost-be-localhost makes both a MUST. The proxy
// never looks them up: they are LocalhostAddrs, whatever the host's
// resolver would say (Go's, asked for the rooted "localhost.", misses the
// hosts file and asks the DNS server; see executor/egress/allow.go).
func IsLocalhost(name string) bool {
	return name == "localhost" || strings.HasSuffix(name, ".localhost")
}

// LocalhostAddrs are the addresses a localhost name stands for, in the
// order the proxy tries them.
func LocalhostAddrs() []netip.Addr {
	return []netip.Addr{netip.AddrFrom4([4]byte{127, 0, 0, 1}), netip.IPv6Loopback()}
}

// Rules parses the section: Allow's rules and CIDRs' ranges, and checks
// that every localhost rule has a range admitting the loopback on its
// port. Its errors are *FieldError with the entry's JSON path
// ("egress.allow[2]"), all at once; Policy.Validate reports the same.
func (e *Egress) Rules() ([]HostRule, []CIDRRule, error) {
	var v validator
	rules, cidrs := v.egress(e)
	return rules, cidrs, v.err()
}

func (v *validator) egress(e *Egress) ([]HostRule, []CIDRRule) {
	// The ranges first, for the localhost rules' check (skipped when one
	// is refused: it may be the missing one); their errors after the
	// rules', in the document's order.
	var cv validator
	cidrs := cv.egressCIDRs(e.CIDRs)
	rules := v.egressRules(e.Allow, cidrs, len(cv.errs) == 0)
	v.errs = append(v.errs, cv.errs...)
	return rules, cidrs
}

// egressRules parses allow; with checkLoopback, a localhost rule must
// have a range of cidrs that admits it.
func (v *validator) egressRules(allow []string, cidrs []CIDRRule, checkLoopback bool) []HostRule {
	var out []HostRule
	for i, s := range allow {
		at := fmt.Sprintf("egress.allow[%d]", i)
		r, reason := parseHostRule(s)
		if reason == "" && checkLoopback && IsLocalhost(r.Name) && !loopbackAdmitted(cidrs, r.Port) {
			reason = localhostUnreachable(r.Port)
		}
		if reason != "" {
			v.add(at, s, "%s", reason)
			continue
		}
		out = append(out, r)
	}
	return out
}

// localhostUnreachable is the reason to refuse a localhost rule that no
// range lets reach the loopback on the rule's port (on every port, for a
// rule without one): the proxy would deny every request it allows, and a
// rule that reads as an opening but is none is a mistake to report when
// the policy is checked, with its fix, rather than as a 403 at run time.
func localhostUnreachable(port uint16) string {
	if port == 0 {
		return "names the host's loopback (localhost is never looked up), and no entry of egress.cidrs admits 127.0.0.1 or ::1 on every port; " +
			"add 127.0.0.1/32 to egress.cidrs (moat run --allow-cidr 127.0.0.1/32), or give the rule a port and admit that one only (localhost:8080 with 127.0.0.1/32:8080)"
	}
	return fmt.Sprintf("names the host's loopback (localhost is never looked up), and no entry of egress.cidrs admits 127.0.0.1 or ::1 on port %d; "+
		"add 127.0.0.1/32:%d to egress.cidrs (moat run --allow-cidr 127.0.0.1/32:%d)", port, port, port)
}

// loopbackAdmitted reports whether a range admits one of LocalhostAddrs
// on port (0: on every port, so only a range without a port does).
func loopbackAdmitted(cidrs []CIDRRule, port uint16) bool {
	for _, c := range cidrs {
		if c.Port != 0 && c.Port != port {
			continue
		}
		for _, ip := range LocalhostAddrs() {
			if c.Prefix.Contains(ip) {
				return true
			}
		}
	}
	return false
}

// parseHostRule reads "NAME[:PORT]"; a non-empty reason says what is wrong.
func parseHostRule(s string) (HostRule, string) {
	var r HostRule
	name := s
	if i := strings.LastIndexByte(s, ':'); i >= 0 {
		name = s[:i]
		port, err := strconv.ParseUint(s[i+1:], 10, 16)
		if err != nil || port == 0 {
			return r, "has a port out of range; use NAME or NAME:PORT with a port from 1 to 65535"
		}
		r.Port = uint16(port)
	}
	name = strings.TrimSuffix(strings.ToLower(name), ".")
	if name == "" {
		return r, "has an empty host name; use a name like pypi.org or *.pythonhosted.org"
	}
	if _, err := netip.ParseAddr(strings.Trim(name, "[]")); err == nil || strings.ContainsAny(name, "[]") {
		return r, "is an IP address; list raw addresses as ranges in egress.cidrs"
	}
	if rest, ok := strings.CutPrefix(name, "*."); ok {
		r.Wildcard = true
		name = rest
	}
	if strings.Contains(name, "*") {
		return r, "has a wildcard that is not the whole first label; only a leading \"*.\" is allowed, as in *.example.com"
	}
	if !isHostName(name) {
		return r, "is not a host name; use letters, digits, '-' and '.', in labels of 1 to 63 characters"
	}
	// *.localhost is the one wildcard over a top-level domain that opens
	// no more than its names say: they are all the loopback (IsLocalhost).
	if r.Wildcard && !strings.Contains(name, ".") && name != "localhost" {
		return r, "is a wildcard over a top-level domain; name a domain below it, as in *.example.com"
	}
	r.Name = name
	return r, ""
}

// isHostName checks RFC 1123 labels (underscores allowed: some service
// names use them).
func isHostName(s string) bool {
	if len(s) > 253 {
		return false
	}
	for _, label := range strings.Split(s, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}
