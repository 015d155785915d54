//go:build !amd64

package attack

// archProbes are the compat-ABI probes; only amd64 has them so far.
var archProbes []Probe
