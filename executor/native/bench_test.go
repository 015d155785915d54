package native_test

import (
	"context"
	"encoding/json"
	"github.com/moat-sandbox/moat/conformance/testenv"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/executor"
	"github.com/moat-sandbox/moat/executor/native"
	"github.com/moat-sandbox/moat/executor/subprocess"
	"github.com/moat-sandbox/moat/ledger"
	"github.com/moat-sandbox/moat/nsexec"
)

// The dispatch benchmarks (issue 9) run the same trivial tool, /bin/true,
// through the full protocol (stdin document, captured output, result
// parsing) with a memory ledger, so the figures differ only in how the
// child is started. Each reports its ratio to the subprocess floor measured
// in the same run. In CI they run a few iterations:
//
//	go test -run '^$' -bench . -benchtime 3x ./executor/native/
//
// and in full by hand, e.g. -benchtime 500x -count 5.

func benchRequest() *executor.Request {
	return &executor.Request{Tool: "bench", Args: json.RawMessage(`{}`), Spec: json.RawMessage(`{}`),
		RunID: "bench-run", SpanID: "bench-span", IdempotencyKey: "bench-key"}
}

// floor is the subprocess ns/op of this run, for the ratios.
var floor float64

func BenchmarkDispatch(b *testing.B) {
	withInit(b)
	b.Run("subprocess", func(b *testing.B) {
		p, err := subprocess.New(subprocess.WithCommand("/bin/true"), subprocess.WithLedger(&ledger.Memory{}))
		if err != nil {
			b.Fatal(err)
		}
		floor = 0
		floor = dispatchLoop(b, p, nil)
	})
	b.Run("native-cold", func(b *testing.B) {
		dispatchLoop(b, benchProvider(b), nil)
	})
	b.Run("native-cold-init", func(b *testing.B) {
		dispatchLoop(b, benchProvider(b, native.WithInitPath(moatInit(b))), nil)
	})
	b.Run("native-warm", func(b *testing.B) {
		p := benchProvider(b, native.WithPool(2))
		dispatchLoop(b, p, func() { waitPool(b, p, 2) })
		reportPool(b, p)
	})
	b.Run("native-warm-init", func(b *testing.B) {
		p := benchProvider(b, native.WithPool(2), native.WithInitPath(moatInit(b)))
		dispatchLoop(b, p, func() { waitPool(b, p, 2) })
		reportPool(b, p)
	})
	// The Go init as pid 1 to the end, for the side-by-side: the C tail
	// serves prepared sandboxes only, and only when this test binary is
	// static (.ci/speed builds it so); in a dynamic one the -notail
	// variants measure the same as the others.
	b.Run("native-warm-init-notail", func(b *testing.B) {
		p := benchProvider(b, native.WithPool(2), native.WithInitPath(moatInit(b)), native.WithNsexecOptions(nsexec.WithoutTail()))
		dispatchLoop(b, p, func() { waitPool(b, p, 2) })
		reportPool(b, p)
	})
	// Two at a time (GOMAXPROCS callers on this 2-CPU host): the
	// throughput target compares the warm pool with plain subprocesses.
	var parFloor float64
	b.Run("subprocess-parallel", func(b *testing.B) {
		p, err := subprocess.New(subprocess.WithCommand("/bin/true"), subprocess.WithLedger(&ledger.Memory{}))
		if err != nil {
			b.Fatal(err)
		}
		parFloor = parallelLoop(b, p)
	})
	b.Run("native-warm-parallel", func(b *testing.B) {
		p := benchProvider(b, native.WithPool(4), native.WithInitPath(moatInit(b)))
		waitPool(b, p, 4)
		ns := parallelLoop(b, p)
		if parFloor > 0 {
			b.ReportMetric(ns/parFloor, "x-subprocess-parallel")
		}
		reportPool(b, p)
	})
	b.Run("native-warm-parallel-notail", func(b *testing.B) {
		p := benchProvider(b, native.WithPool(4), native.WithInitPath(moatInit(b)), native.WithNsexecOptions(nsexec.WithoutTail()))
		waitPool(b, p, 4)
		ns := parallelLoop(b, p)
		if parFloor > 0 {
			b.ReportMetric(ns/parFloor, "x-subprocess-parallel")
		}
		reportPool(b, p)
	})
	// Back to back, without waiting for the refill: the sustained rate, where
	// the pool only helps as far as the refill keeps up.
	b.Run("native-warm-sustained", func(b *testing.B) {
		p := benchProvider(b, native.WithPool(2), native.WithInitPath(moatInit(b)))
		waitPool(b, p, 2)
		dispatchLoop(b, p, nil)
		reportPool(b, p)
	})
	b.Run("native-warm-sustained-notail", func(b *testing.B) {
		p := benchProvider(b, native.WithPool(2), native.WithInitPath(moatInit(b)), native.WithNsexecOptions(nsexec.WithoutTail()))
		waitPool(b, p, 2)
		dispatchLoop(b, p, nil)
		reportPool(b, p)
	})
	// Reuse on (-reuse, native.WithReuse) and off (-nocg), both without
	// cgroups, which reuse needs on a hybrid host: the same three rows.
	for _, v := range []struct {
		name string
		opts []native.Option
	}{{"nocg", nil}, {"reuse", []native.Option{native.WithReuse(1000)}}} {
		opts := append([]native.Option{native.WithInitPath(moatInit(b)), native.WithoutCgroups()}, v.opts...)
		b.Run("native-warm-init-"+v.name, func(b *testing.B) {
			p := benchProvider(b, append(opts, native.WithPool(2))...)
			dispatchLoop(b, p, func() { waitPool(b, p, 2) })
			reportPool(b, p)
		})
		b.Run("native-warm-parallel-"+v.name, func(b *testing.B) {
			p := benchProvider(b, append(opts, native.WithPool(4))...)
			waitPool(b, p, 4)
			ns := parallelLoop(b, p)
			if parFloor > 0 {
				b.ReportMetric(ns/parFloor, "x-subprocess-parallel")
			}
			reportPool(b, p)
		})
		b.Run("native-warm-sustained-"+v.name, func(b *testing.B) {
			p := benchProvider(b, append(opts, native.WithPool(2))...)
			waitPool(b, p, 2)
			dispatchLoop(b, p, nil)
			reportPool(b, p)
		})
	}
}

// benchProvider is the native provider with full isolation: the default
// policy (every namespace, read-only root, the default seccomp filter and
// its cgroup limits) running /bin/true.
func benchProvider(b *testing.B, opts ...native.Option) *native.Provider {
	b.Helper()
	all := append([]native.Option{native.WithCommand("/bin/true"), native.WithLedger(&ledger.Memory{})}, opts...)
	p, err := native.New(all...)
	if err != nil {
		b.Fatalf("native.New: %v", err)
	}
	b.Cleanup(func() { p.Close() })
	return p
}

// dispatchLoop runs b.N dispatches of p, calling between (timer stopped)
// before each, and returns the ns/op it reports.
func dispatchLoop(b *testing.B, p executor.Provider, between func()) float64 {
	b.Helper()
	ctx := context.Background()
	req := benchRequest()
	b.ResetTimer()
	for range b.N {
		if between != nil {
			b.StopTimer()
			between()
			b.StartTimer()
		}
		if _, err := p.Dispatch(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	ns := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
	if floor > 0 && ns != floor {
		b.ReportMetric(ns/floor, "x-subprocess")
	}
	return ns
}

// parallelLoop runs b.N dispatches of p from GOMAXPROCS goroutines and
// returns the wall time per dispatch (the inverse of the throughput).
func parallelLoop(b *testing.B, p executor.Provider) float64 {
	b.Helper()
	req := benchRequest()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := p.Dispatch(context.Background(), req); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	ns := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
	b.ReportMetric(1e9/ns, "dispatches/s")
	return ns
}

// waitPool waits until the pool holds n ready sandboxes again.
func waitPool(b *testing.B, p *native.Provider, n int) {
	deadline := time.Now().Add(10 * time.Second)
	for p.PoolStats().Ready < n {
		if time.Now().After(deadline) {
			b.Fatalf("the warm pool did not refill: %+v", p.PoolStats())
		}
		time.Sleep(100 * time.Microsecond)
	}
}

func reportPool(b *testing.B, p *native.Provider) {
	s := p.PoolStats()
	if s.Hits+s.Misses > 0 {
		b.ReportMetric(float64(s.Hits)/float64(s.Hits+s.Misses), "hit-ratio")
	}
}

// initPath is the cmd/moat-init binary of the running top-level benchmark.
var initPath string

// withInit builds cmd/moat-init (static, without cgo) for the benchmarks
// of b into a 0755 temp directory removed with b, so the sandbox init can
// be the small binary instead of this test binary.
func withInit(b *testing.B) {
	b.Helper()
	path, err := buildInit(b.TempDir())
	if err != nil {
		initPath = ""
		b.Logf("build cmd/moat-init: %v; the -init variants skip", err)
		return
	}
	initPath = path
}

// moatInit returns the binary withInit built, or skips.
func moatInit(b *testing.B) string {
	b.Helper()
	if initPath == "" {
		testenv.Skipf(b, "no cmd/moat-init binary (see the build log above)")
	}
	return initPath
}

func buildInit(tmp string) (string, error) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		gobin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	dir := filepath.Join(tmp, "init")
	if err := os.Mkdir(dir, 0o755); err != nil {
		return "", err
	}
	// b.TempDir's own directories are 0700; the init must be reachable by
	// the sandbox's host id and by nobody.
	for d := dir; d != filepath.Dir(tmp); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			return "", err
		}
	}
	out := filepath.Join(dir, "moat-init")
	cmd := exec.Command(gobin, "build", "-trimpath", "-ldflags=-s -w", "-o", out, "github.com/moat-sandbox/moat/cmd/moat-init")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if msg, err := cmd.CombinedOutput(); err != nil {
		return "", &buildError{err: err, output: string(msg)}
	}
	return out, nil
}

type buildError struct {
	err    error
	output string
}

func (e *buildError) Error() string { return e.err.Error() + ": " + e.output }
func (e *buildError) Unwrap() error { return e.err }
