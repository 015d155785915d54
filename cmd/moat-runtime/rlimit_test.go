package main

import (
	"syscall"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// TestRaiseRlimitsNeverLowersTheMonitor: a config's small limits are the
// init's to set; the monitor keeps its own (a NOFILE of 4 would end its
// accepts, a CPU limit would kill it), and only raises what is above.
func TestRaiseRlimitsNeverLowersTheMonitor(t *testing.T) {
	var before syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &before); err != nil {
		t.Fatal(err)
	}
	raiseRlimits([]specs.POSIXRlimit{{Type: "RLIMIT_NOFILE", Soft: 4, Hard: 4}})
	var after syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &after); err != nil {
		t.Fatal(err)
	}
	if after != before {
		t.Fatalf("RLIMIT_NOFILE %+v after a config asking 4/4, want the monitor's own %+v", after, before)
	}
}
