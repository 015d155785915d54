package container_test

import (
	"os"
	"os/signal"
	"syscall"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/conformance"
)

// stubbornVar, minted into a tool's environment, makes the runner copy of
// this test binary ignore SIGTERM and sleep: a tool that only SIGKILL stops.
const stubbornVar = "MOAT_CONTAINER_TEST_STUBBORN"

func TestMain(m *testing.M) {
	if os.Getenv(stubbornVar) == "1" {
		signal.Ignore(syscall.SIGTERM)
		time.Sleep(100 * time.Second)
		os.Exit(0)
	}
	conformance.Main(m)
}
