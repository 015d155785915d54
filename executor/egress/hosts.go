package egress

import (
	"context"
	"net"
	"net/netip"
	"strings"
)

// Hosts is a fixed Resolver: each name maps to its addresses, and any
// other name does not resolve. Tests use it to lead allowed names to
// servers on the host's loopback (WithResolver).
type Hosts map[string][]netip.Addr

// LookupNetIP returns host's addresses, or a not-found *net.DNSError.
func (h Hosts) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := h[strings.TrimSuffix(host, ".")]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}
