package seccomp

import (
	"sync"
	"sync/atomic"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

func TestCacheCompilesOncePerProfile(t *testing.T) {
	var calls atomic.Int32
	// A stand-in compiler whose program encodes the first syscall name, so
	// the test runs without libseccomp and can tell programs apart.
	c := &Cache{compile: func(p *specs.LinuxSeccomp) (Program, error) {
		calls.Add(1)
		return Program{{K: uint32(len(p.Syscalls[0].Names[0]))}}, nil
	}}
	a := &specs.LinuxSeccomp{DefaultAction: specs.ActErrno, Syscalls: []specs.LinuxSyscall{{Names: []string{"read"}, Action: specs.ActAllow}}}
	b := &specs.LinuxSeccomp{DefaultAction: specs.ActErrno, Syscalls: []specs.LinuxSyscall{{Names: []string{"getpid"}, Action: specs.ActAllow}}}
	aCopy := *a // equal content, different pointer
	var wg sync.WaitGroup
	for i := 0; i < 16; i++ {
		for _, p := range []*specs.LinuxSeccomp{a, b, &aCopy} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := c.Program(p); err != nil {
					t.Error(err)
				}
			}()
		}
	}
	wg.Wait()
	if n := calls.Load(); n != 2 {
		t.Fatalf("compiled %d times, want 2 (one per distinct profile)", n)
	}
	if c.Len() != 2 {
		t.Fatalf("cache holds %d profiles, want 2", c.Len())
	}
	pa, _ := c.Program(a)
	pb, _ := c.Program(b)
	if len(pa) == 0 || len(pb) == 0 || equal(pa, pb) {
		t.Fatal("distinct profiles must give distinct, non-empty programs")
	}
}

func TestCacheForgetsFailures(t *testing.T) {
	var calls atomic.Int32
	c := &Cache{compile: func(p *specs.LinuxSeccomp) (Program, error) {
		calls.Add(1)
		return Compile(p)
	}}
	bad := &specs.LinuxSeccomp{DefaultAction: "SCMP_ACT_BOGUS"}
	for i := 0; i < 2; i++ {
		if _, err := c.Program(bad); err == nil {
			t.Fatal("want an error for an unknown action")
		}
	}
	if calls.Load() != 2 || c.Len() != 0 {
		t.Fatalf("calls %d, len %d: a failure must not stay cached", calls.Load(), c.Len())
	}
}

func equal(a, b Program) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
