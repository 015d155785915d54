package ledger

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

func benchIntent(i int) Intent {
	in := intentFor(fmt.Sprintf("%064x", i), fmt.Sprintf("1b4e28ba-2fa1-41d2-883f-%012x", i), Millis(1755000000000+i))
	in.RunID = "01J00000000000000000000RUN"
	in.SpanID = "01J0000000000000000000SPAN"
	in.Workdir = fmt.Sprintf("/tmp/rulvar-exec-%08x", i)
	return in
}

func benchAppend(b *testing.B, opts ...Option) {
	l, err := Open(filepath.Join(b.TempDir(), "effects.jsonl"), opts...)
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	in := benchIntent(1)
	row, _ := appendIntentRow(nil, &in)
	b.SetBytes(int64(len(row)))
	b.ReportAllocs()
	ctx := context.Background()
	for b.Loop() {
		if err := l.Intent(ctx, in); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAppendIntent(b *testing.B)      { benchAppend(b) }
func BenchmarkAppendIntentFsync(b *testing.B) { benchAppend(b, WithFsync()) }

// BenchmarkScan1M scans a 1,000,000-row ledger (an intent and an outcome
// per attempt, every 10th attempt orphaned) generated once.
func BenchmarkScan1M(b *testing.B) {
	const rows = 1_000_000
	path := filepath.Join(b.TempDir(), "effects.jsonl")
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	var buf []byte
	written := 0
	for i := 0; written < rows; i++ {
		in := benchIntent(i)
		buf, _ = appendIntentRow(buf[:0], &in)
		w.Write(buf)
		written++
		if i%10 != 9 && written < rows {
			buf, _ = appendRecordRow(buf[:0], &Record{Intent: in, DurationMs: 17, Outcome: OutcomeOK, ExitCode: new(int)})
			w.Write(buf)
			written++
		}
	}
	if err := w.Flush(); err != nil {
		b.Fatal(err)
	}
	fi, _ := f.Stat()
	f.Close()
	b.SetBytes(fi.Size())
	b.ReportAllocs()
	for b.Loop() {
		res, err := Scan(path)
		if err != nil {
			b.Fatal(err)
		}
		if n := len(res.Intents) + len(res.Outcomes); n != rows {
			b.Fatalf("scanned %d rows", n)
		}
	}
	b.ReportMetric(float64(rows)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
}
