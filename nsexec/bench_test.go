//go:build linux

package nsexec

import (
	"context"
	"os/exec"
	"testing"
	"time"
)

// BenchmarkStartTrue spawns /bin/true through the full setup (host mode,
// every namespace, the mount tree, the privilege drop) and waits for it.
func BenchmarkStartTrue(b *testing.B) { startTrue(b, false) }

// BenchmarkStartTrueLandlock is BenchmarkStartTrue with Config.Landlock:
// the difference is the Landlock domain's cost on a cold start.
func BenchmarkStartTrueLandlock(b *testing.B) { startTrue(b, true) }

func startTrue(b *testing.B, landlock bool) {
	cfg := &Config{Args: []string{"/bin/true"}, Workdir: b.TempDir(), Landlock: landlock}
	for b.Loop() {
		p, err := Start(context.Background(), cfg, Stdio{})
		if err != nil {
			b.Fatal(err)
		}
		if e, err := p.Wait(); err != nil || e.Code != 0 {
			b.Fatalf("%+v %v", e, err)
		}
	}
}

// BenchmarkPlainExecTrue is the floor: fork and exec /bin/true, no sandbox.
func BenchmarkPlainExecTrue(b *testing.B) {
	for b.Loop() {
		if err := exec.Command("/bin/true").Run(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkStartTrueStages is BenchmarkStartTrue with WithTrace: each
// stage's mean shows as its own metric (µs/op).
func BenchmarkStartTrueStages(b *testing.B) { startTrueStages(b, false) }

// BenchmarkStartTrueStagesLandlock is BenchmarkStartTrueStages with
// Config.Landlock, whose domain is made in the seccomp stage.
func BenchmarkStartTrueStagesLandlock(b *testing.B) { startTrueStages(b, true) }

func startTrueStages(b *testing.B, landlock bool) {
	cfg := &Config{Args: []string{"/bin/true"}, Workdir: b.TempDir(), Landlock: landlock}
	var sum Trace
	n := 0
	rec := WithTrace(func(t Trace) { sum = addTrace(sum, t); n++ })
	for b.Loop() {
		p, err := Start(context.Background(), cfg, Stdio{}, rec)
		if err != nil {
			b.Fatal(err)
		}
		if e, err := p.Wait(); err != nil || e.Code != 0 {
			b.Fatalf("%+v %v", e, err)
		}
	}
	reportTrace(b, sum, n)
}

func addTrace(a, t Trace) Trace {
	return Trace{a.Spawn + t.Spawn, a.Runtime + t.Runtime, a.Config + t.Config, a.Handshake + t.Handshake,
		a.Sources + t.Sources, a.Mounts + t.Mounts, a.Pivot + t.Pivot, a.Hygiene + t.Hygiene,
		a.Privileges + t.Privileges, a.Seccomp + t.Seccomp, a.Exec + t.Exec}
}

func reportTrace(b *testing.B, t Trace, n int) {
	if n == 0 {
		return
	}
	for name, d := range map[string]time.Duration{"spawn": t.Spawn, "runtime": t.Runtime, "config": t.Config,
		"handshake": t.Handshake, "sources": t.Sources, "mounts": t.Mounts, "pivot": t.Pivot, "hygiene": t.Hygiene,
		"privs": t.Privileges, "seccomp": t.Seccomp, "exec": t.Exec} {
		b.ReportMetric(float64(d.Microseconds())/float64(n), name+"-µs/op")
	}
}

// BenchmarkPreparedTrue is the warm path: a sandbox prepared with the timer
// stopped, then only the request, the exec of /bin/true and the wait.
func BenchmarkPreparedTrue(b *testing.B) { preparedTrue(b, false) }

// BenchmarkPreparedTrueLandlock is BenchmarkPreparedTrue with
// Config.Landlock: the domain is made while the sandbox is prepared, so
// the difference on a warm dispatch should be none.
func BenchmarkPreparedTrueLandlock(b *testing.B) { preparedTrue(b, true) }

func preparedTrue(b *testing.B, landlock bool) {
	cfg := &Config{Workdir: b.TempDir(), Landlock: landlock}
	for range b.N {
		b.StopTimer()
		s, err := Prepare(context.Background(), cfg)
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		p, err := s.Exec(context.Background(), []string{"/bin/true"}, nil, Stdio{})
		if err != nil {
			b.Fatal(err)
		}
		if e, err := p.Wait(); err != nil || e.Code != 0 {
			b.Fatalf("%+v %v", e, err)
		}
	}
}
