package native_test

import (
	"testing"

	"github.com/moat-sandbox/moat/conformance"
	"github.com/moat-sandbox/moat/conformance/testenv"
)

func TestMain(m *testing.M) { conformance.Main(m) }

// newProvider is the conformance factory: the default policy, with the
// runner's directory bound read-only at the same path (policyProvider).
var newProvider = policyProvider("default")

var everything = conformance.WithIsolation(conformance.Isolation{Filesystem: true, Network: true, PIDs: true, Privileges: true, Seccomp: true})

func TestConformance(t *testing.T) { conformance.Run(t, newProvider, everything) }

func TestConformanceAsNobody(t *testing.T) {
	if testenv.RunAsUser(t, testenv.NobodyUID, testenv.NobodyGID) {
		return
	}
	conformance.Run(t, newProvider, everything)
}
