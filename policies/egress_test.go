package policies

import (
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
	rules, err := e.Rules()
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
	ps, err := e.Prefixes()
	if err != nil || len(ps) != 2 || ps[0].String() != "127.0.0.1/32" || ps[1].String() != "10.1.0.0/16" {
		t.Errorf("prefixes %v, %v", ps, err)
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
