package conformance_test

import (
	"testing"

	"github.com/moat-sandbox/moat/conformance"
)

func TestMain(m *testing.M) { conformance.Main(m) }

// The custom provider of the example passes the kit.
func TestCustomProvider(t *testing.T) { testConformance(t) }
