package main

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/moat-sandbox/moat/executor/egress"
	"github.com/moat-sandbox/moat/policies"
)

// egressReport is what moat doctor says about egress: which built-in
// policies allow what (none does), and whether the host-side proxy starts
// here and denies what is not listed.
type egressReport struct {
	// Policies maps each built-in policy with an egress section to its
	// allowlist; the others reach nothing.
	Policies map[string][]string `json:"policies,omitempty"`
	// Proxy is true when a proxy started, gave a sandbox its socket and
	// refused a name not on that sandbox's empty allowlist with a 403.
	Proxy bool   `json:"proxy"`
	Error string `json:"error,omitempty"`
}

func egressCheck(r *doctorReport) {
	for _, name := range policies.Builtins() {
		if pol, err := policies.Builtin(name); err == nil && pol.Egress != nil {
			if r.Egress.Policies == nil {
				r.Egress.Policies = map[string][]string{}
			}
			r.Egress.Policies[name] = append(pol.Egress.Allow, pol.Egress.CIDRs...)
		}
	}
	if err := proxyDenies(); err != nil {
		r.Egress.Error = err.Error()
		r.Problems = append(r.Problems, problem{"the egress proxy does not work here: " + err.Error(),
			"moat run --allow-host needs a writable temporary directory (TMPDIR) for the proxy's sockets"})
		return
	}
	r.Egress.Proxy = true
}

// proxyDenies starts a proxy and asks it, through a sandbox's socket with
// nothing allowed, for a name that must be refused.
func proxyDenies() error {
	p, err := egress.New()
	if err != nil {
		return err
	}
	defer p.Close()
	s, err := p.Open(&egress.Allowlist{})
	if err != nil {
		return err
	}
	defer s.Close()
	c, err := net.DialTimeout("unix", s.Socket(), 2*time.Second)
	if err != nil {
		return fmt.Errorf("connect to a sandbox's socket: %w", err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	fmt.Fprint(c, "CONNECT unlisted.invalid:443 HTTP/1.1\r\nHost: unlisted.invalid:443\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return fmt.Errorf("read the proxy's answer: %w", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		return fmt.Errorf("a name on no allowlist got %s, not 403 Forbidden", resp.Status)
	}
	return nil
}

// egressLine is the report's egress line.
func egressLine(e egressReport) (bool, string) {
	if !e.Proxy {
		return false, "the proxy does not start (see problems)"
	}
	allows := "no built-in policy allows a host"
	if len(e.Policies) > 0 {
		var parts []string
		for name, allow := range e.Policies {
			parts = append(parts, name+": "+strings.Join(allow, " "))
		}
		allows = strings.Join(parts, "; ")
	}
	return true, "deny all by default; " + allows + "; --allow-host opens one"
}
