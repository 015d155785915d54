package main

import (
	"log/slog"
	"slices"

	"github.com/moat-sandbox/moat/executor/egress"
	"github.com/moat-sandbox/moat/policies"
)

// egressResolver, when set, replaces the host's resolver in the run's
// egress proxy. Only the tests set it (TestMain of the CLI copy), to send
// names to servers on the host's loopback: there is no internet there.
var egressResolver egress.Resolver

// addEgress adds --allow-host and --allow-cidr to the policy's egress
// section (a copy: the policy's own lists stay as loaded).
func addEgress(pol *policies.Policy, hosts, cidrs []string) {
	if len(hosts) == 0 && len(cidrs) == 0 {
		return
	}
	var e policies.Egress
	if pol.Egress != nil {
		e = *pol.Egress
	}
	e.Allow = append(slices.Clone(e.Allow), hosts...)
	e.CIDRs = append(slices.Clone(e.CIDRs), cidrs...)
	pol.Egress = &e
}

// newEgressProxy starts the run's one egress proxy; denials are logged
// through the run's logger.
func newEgressProxy(logger *slog.Logger) (*egress.Proxy, error) {
	opts := []egress.Option{egress.WithLogger(logger)}
	if egressResolver != nil {
		opts = append(opts, egress.WithResolver(egressResolver))
	}
	return egress.New(opts...)
}
