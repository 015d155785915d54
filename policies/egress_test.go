package policies

import (
	"net/netip"
	"strings"
	"testing"
)

func TestEgressMistakesNameTheirPath(t *testing.T) {
	doc := `{"name": "e", "unfiltered": true, "egress": {
  "allow": ["pypi.org", "", "api.example.com:0", "a.*.example.com", "files.*", "10.0.0.1", "host:99999", "*.com", "ok.example:443", "bad_-.", "*.files.example"],
  "cidrs": ["10.0.0.0/8", "10.0.0.0/33", "nonsense", "::1"]}}`
	_, err := Parse(strings.NewReader(doc))
	got := map[string]string{}
	for _, fe := range FieldErrors(err) {
		got[fe.Path] = fe.Reason
	}
	want := map[string]string{
		"egress.allow[1]": "empty host name",
		"egress.allow[2]": "port out of range",
		"egress.allow[3]": "wildcard that is not the whole first label",
		"egress.allow[4]": "wildcard that is not the whole first label",
		"egress.allow[5]": "is an IP address",
		"egress.allow[6]": "port out of range",
		"egress.allow[7]": "top-level domain",
		"egress.allow[9]": "not a host name",
		"egress.cidrs[1]": "not an IP range",
		"egress.cidrs[2]": "not an IP range",
	}
	for path, frag := range want {
		if !strings.Contains(got[path], frag) {
			t.Errorf("%s: reason %q, want it to say %q", path, got[path], frag)
		}
	}
	if len(got) != len(want) {
		t.Errorf("errors at %v, want exactly the paths %v", got, want)
	}
}

func TestEgressRulesMatch(t *testing.T) {
	e := &Egress{Allow: []string{"PyPI.org.", "*.pythonhosted.org", "api.example.com:8443"}, CIDRs: []string{"127.0.0.1", "10.1.0.0/16"}}
	rules, ps, err := e.Rules()
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		host  string
		port  uint16
		allow bool
	}{
		{"pypi.org", 443, true},
		{"pypi.org", 80, true},
		{"evil-pypi.org", 443, false},
		{"files.pythonhosted.org", 443, true},
		{"a.b.pythonhosted.org", 443, true},
		{"pythonhosted.org", 443, false}, // the wildcard is below the domain only
		{"xpythonhosted.org", 443, false},
		{"api.example.com", 8443, true},
		{"api.example.com", 443, false},
	}
	for _, c := range cases {
		got := false
		for _, r := range rules {
			got = got || r.Matches(c.host, c.port)
		}
		if got != c.allow {
			t.Errorf("%s:%d allowed=%v, want %v (rules %v)", c.host, c.port, got, c.allow, rules)
		}
	}
	if len(ps) != 2 || ps[0].String() != "127.0.0.1/32" || ps[1].String() != "10.1.0.0/16" {
		t.Errorf("ranges %v", ps)
	}
}

func TestEgressReplacedAsAWhole(t *testing.T) {
	base := &Policy{Name: "b", Unfiltered: true, Egress: &Egress{Allow: []string{"a.example"}}}
	child := &Policy{Name: "c", Egress: &Egress{Allow: []string{"b.example"}}}
	got := merge(clone(base), clone(child))
	if len(got.Egress.Allow) != 1 || got.Egress.Allow[0] != "b.example" {
		t.Errorf("merged egress %v, want the extending policy's alone", got.Egress.Allow)
	}
	got = merge(clone(base), &Policy{Name: "d"})
	if got.Egress == nil || got.Egress.Allow[0] != "a.example" {
		t.Errorf("an extending policy without egress lost the base's: %v", got.Egress)
	}
}

// TestEgressCIDRForms: a range takes a port after it, in one spelling per
// range (brackets around an IPv6 address when a port follows); a port
// admits that port only, and no port still means every port. Near-misses
// are refused with the spelling to use.
func TestEgressCIDRForms(t *testing.T) {
	good := []struct {
		in, canon string
		port      uint16
	}{
		{"10.0.0.0/8", "10.0.0.0/8", 0},
		{"10.1.2.3/8", "10.0.0.0/8", 0},
		{"127.0.0.1", "127.0.0.1/32", 0},
		{"::1", "::1/128", 0},
		{"2001:db8::/32", "2001:db8::/32", 0},
		{"10.0.0.0/8:443", "10.0.0.0/8:443", 443},
		{"127.0.0.1/32:8080", "127.0.0.1/32:8080", 8080},
		{"127.0.0.1:8080", "127.0.0.1/32:8080", 8080},
		{"[::1]/128:8080", "[::1]/128:8080", 8080},
		{"[::1]:8080", "[::1]/128:8080", 8080},
		{"[FD00::]/8:65535", "[fd00::]/8:65535", 65535},
		{"192.0.2.0/24:1", "192.0.2.0/24:1", 1},
		{"::ffff:0.0.0.0/0", "::/0", 0}, // mapped in spelling only: masked, it is all of IPv6
		{"[::ffff:0:0]/80:443", "[::]/80:443", 443},
	}
	for _, g := range good {
		r, reason := parseCIDRRule(g.in)
		if reason != "" || r.String() != g.canon || r.Port != g.port {
			t.Errorf("%q: %v port %d (%q), want %s port %d", g.in, r, r.Port, reason, g.canon, g.port)
			continue
		}
		if back, reason := parseCIDRRule(r.String()); reason != "" || back != r {
			t.Errorf("%q: the canonical %q reads back as %v (%q)", g.in, r.String(), back, reason)
		}
	}
	bad := []struct{ in, reason string }{
		{"10.0.0.0/8:0", "port out of range"},
		{"10.0.0.0/8:65536", "port out of range"},
		{"10.0.0.0/8:", "port out of range"},
		{"10.0.0.0/8:https", "port out of range"},
		{"10.0.0.0:443/8", "put a port from 1 to 65535 after the range"},
		{"[::1]:0", "port out of range"},
		{"[::1]:", "port out of range"},
		{"fd00::/8:443", "takes brackets: write [fd00::]/8:443"},
		{"::1/128:8080", "takes brackets: write [::1]/128:8080"},
		{"[fd00::/8]:443", "length inside the brackets; write [fd00::]/8:443"},
		{"[::1]", "brackets but no port; brackets are for a port: write ::1, or [::1]:PORT"},
		{"[fd00::]/8", "brackets but no port; brackets are for a port: write fd00::/8, or [fd00::]/8:PORT"},
		{"[fd00::/8]", "brackets but no port; brackets are for a port: write fd00::/8, or [fd00::]/8:PORT"},
		{"[::1", "without its ']'"},
		{"[::1]x:80", "not an IP range"},
		{"[10.0.0.1]:80", "brackets are for IPv6 only: write 10.0.0.1:80"},
		{"[10.0.0.0/8]:80", "length inside the brackets"},
		{"::1:8080", "IPv4-compatible IPv6 address"},
		{"fe80::1%eth0", "zone"},
		{"[fe80::1%eth0]:80", "zone"},
		{"::ffff:10.0.0.0/104", "write the IPv4 range instead, as in 10.0.0.0/8"},
		{"::ffff:10.0.0.1", "as in 10.0.0.1/32"},
		{"localhost:8080", "host names go in egress.allow"},
		{"10.0.0.0/33", "not an IP range"},
		{"10.0.0.0/8:443:1", "not an IP range"},
		{"nonsense", "not an IP range"},
		{"", "not an IP range"},
	}
	for _, b := range bad {
		if r, reason := parseCIDRRule(b.in); !strings.Contains(reason, b.reason) {
			t.Errorf("%q: %v (%q), want a refusal saying %q", b.in, r, reason, b.reason)
		}
	}
	// Through a document: the field and the value are named.
	_, err := Parse(strings.NewReader(`{"name": "e", "unfiltered": true, "egress": {"cidrs": ["10.0.0.0/8:443", "fd00::/8:443"]}}`))
	fes := FieldErrors(err)
	if len(fes) != 1 || fes[0].Path != "egress.cidrs[1]" || fes[0].Value != `"fd00::/8:443"` {
		t.Errorf("a policy with a bracketless IPv6 range and port: %v", err)
	}
}

func TestEgressCIDRPortsMatch(t *testing.T) {
	_, ps, err := (&Egress{CIDRs: []string{"127.0.0.1/32:8080", "10.0.0.0/8", "[::1]:9090"}}).Rules()
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		ip    string
		port  uint16
		admit bool
	}{
		{"127.0.0.1", 8080, true},
		{"127.0.0.1", 8081, false},
		{"127.0.0.2", 8080, false},
		{"10.200.0.1", 1, true},
		{"10.200.0.1", 65535, true},
		{"::1", 9090, true},
		{"::1", 8080, false},
	}
	for _, c := range cases {
		got := false
		for _, p := range ps {
			got = got || p.Matches(netip.MustParseAddr(c.ip), c.port)
		}
		if got != c.admit {
			t.Errorf("%s port %d admitted=%v, want %v (ranges %v)", c.ip, c.port, got, c.admit, ps)
		}
	}
}

// TestEgressLocalhostNeedsALoopbackRange: localhost is the host's
// loopback, so a rule naming it (in any spelling) is refused when the
// policy is checked unless a range admits 127.0.0.1 or ::1 on the rule's
// port, and the refusal says which range to add.
func TestEgressLocalhostNeedsALoopbackRange(t *testing.T) {
	cases := []struct {
		allow, cidrs []string
		reason       string // "" when accepted
	}{
		{[]string{"localhost:8080"}, nil, "add 127.0.0.1/32:8080 to egress.cidrs (moat run --allow-cidr 127.0.0.1/32:8080)"},
		{[]string{"LOCALHOST.:8080"}, nil, "no entry of egress.cidrs admits 127.0.0.1 or ::1 on port 8080"},
		{[]string{"localhost:8080"}, []string{"127.0.0.1/32:8081", "10.0.0.0/8"}, "on port 8080"},
		{[]string{"localhost"}, []string{"127.0.0.1/32:8080"}, "on every port; add 127.0.0.1/32 to egress.cidrs"},
		{[]string{"*.localhost:3000"}, nil, "on port 3000"},
		{[]string{"app.localhost:3000"}, []string{"127.0.0.2/32:3000"}, "on port 3000"},
		{[]string{"localhost:8080"}, []string{"127.0.0.1/32:8080"}, ""},
		{[]string{"localhost:8080"}, []string{"[::1]:8080"}, ""},
		{[]string{"localhost:8080"}, []string{"127.0.0.0/8"}, ""},
		{[]string{"localhost"}, []string{"127.0.0.1"}, ""},
		{[]string{"*.localhost"}, []string{"::1"}, ""},
		{[]string{"localhost.example.com"}, nil, ""}, // a name under example.com, looked up as any other
	}
	for _, c := range cases {
		_, _, err := (&Egress{Allow: c.allow, CIDRs: c.cidrs}).Rules()
		fes := FieldErrors(err)
		if c.reason == "" {
			if err != nil {
				t.Errorf("allow %q cidrs %q refused: %v", c.allow, c.cidrs, err)
			}
			continue
		}
		if len(fes) != 1 || fes[0].Path != "egress.allow[0]" || !strings.Contains(fes[0].Reason, c.reason) {
			t.Errorf("allow %q cidrs %q: %v, want egress.allow[0] saying %q", c.allow, c.cidrs, err, c.reason)
		}
	}
	// A refused range is not reported a second time as a missing one.
	_, _, err := (&Egress{Allow: []string{"localhost:8080"}, CIDRs: []string{"127.0.0.1/32:80B0"}}).Rules()
	if fes := FieldErrors(err); len(fes) != 1 || fes[0].Path != "egress.cidrs[0]" {
		t.Errorf("a localhost rule with its range misspelt: %v, want the range's error alone", err)
	}
	// Policy.Validate (moat policy check) reports it too.
	_, err = Parse(strings.NewReader(`{"name": "e", "unfiltered": true, "egress": {"allow": ["localhost:8080"]}}`))
	if fes := FieldErrors(err); len(fes) != 1 || !strings.Contains(fes[0].Error(), `egress.allow[0]: "localhost:8080" names the host's loopback`) {
		t.Errorf("a policy document with a localhost rule and no range: %v", err)
	}
}
