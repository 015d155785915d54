//go:build linux

package nsexec

import (
	"fmt"
	"os"
)

// Probes are modes of the test binary itself, bound read-only into a
// sandbox at /probe and run there by name (env probeVar); helpers run on
// the host in a re-exec'd copy (env helperVar).
const (
	probeVar  = "MOAT_NSEXEC_PROBE"
	helperVar = "MOAT_NSEXEC_HELPER"
)

var probes = map[string]func() error{}
var helpers = map[string]func() error{}

func runProbe(name string) {
	dispatch(probes, name)
}

func runHelper(name string) {
	dispatch(helpers, name)
}

func dispatch(m map[string]func() error, name string) {
	f, ok := m[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "unknown probe %q\n", name)
		os.Exit(2)
	}
	if err := f(); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		os.Exit(1)
	}
	os.Exit(0)
}
