package native_test

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/executor/native"
	"github.com/moat-sandbox/moat/nsexec"
)

// BenchmarkPoolIdleMemory reports what one idle pooled sandbox costs the
// host in memory: the proportional set size (Pss, shared pages divided
// among their users) and the RSS of its waiting init, averaged over a full
// pool, with the small static init (init) and with this test binary
// re-executed, as a library embedder's program is (self). There is
// nothing to time; the loop only satisfies the benchmark harness.
func BenchmarkPoolIdleMemory(b *testing.B) {
	withInit(b)
	const size = 4
	for _, v := range []struct {
		name string
		opts []native.Option
	}{
		{"init", []native.Option{native.WithInitPath(moatInit(b))}},
		{"init-notail", []native.Option{native.WithInitPath(moatInit(b)), native.WithNsexecOptions(nsexec.WithoutTail())}},
		{"self", nil},
	} {
		b.Run(v.name, func(b *testing.B) {
			p := benchProvider(b, append(v.opts, native.WithPool(size))...)
			waitPool(b, p, size)
			for b.Loop() {
			}
			var pss, rss, n float64
			for _, pid := range initChildren(b) {
				kb, err := rollup(pid)
				if err != nil {
					b.Fatal(err)
				}
				pss += kb["Pss"]
				rss += kb["Rss"]
				n++
			}
			if n < size {
				b.Fatalf("found %v waiting sandbox inits, want %d", n, size)
			}
			b.ReportMetric(pss/n, "Pss-KiB/sandbox")
			b.ReportMetric(rss/n, "RSS-KiB/sandbox")
		})
	}
}

// initChildren lists this process's children that are sandbox inits.
func initChildren(b *testing.B) []int {
	b.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		b.Fatal(err)
	}
	self := strconv.Itoa(os.Getpid())
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...
		fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		cmd, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if len(fields) > 1 && fields[1] == self && strings.HasPrefix(string(cmd), nsexec.InitArgv0) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// rollup reads /proc/PID/smaps_rollup: field name to kB.
func rollup(pid int) (map[string]float64, error) {
	f, err := os.Open(filepath.Join("/proc", strconv.Itoa(pid), "smaps_rollup"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		fields := strings.Fields(rest)
		if !ok || len(fields) != 2 || fields[1] != "kB" {
			continue
		}
		if v, err := strconv.ParseFloat(fields[0], 64); err == nil {
			out[name] = v
		}
	}
	return out, sc.Err()
}
