package ledger

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// The fuzz targets check the hand-written scanner against an independent
// oracle built on encoding/json (whose grammar is the same ECMA-404 one
// JSON.parse uses), line by line. Seeds live in testdata/fuzz/.

// oracle classifies one line the slow, obvious way.
func oracle(raw []byte, terminated bool) (class string, startedAt float64) {
	bad := "tail"
	if terminated {
		bad = "corrupt"
	}
	if !utf8.Valid(raw) {
		return bad, 0
	}
	text := strings.TrimPrefix(string(raw), "\uFEFF")
	if strings.Trim(text, "\t\n\v\f\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000\ufeff") == "" {
		return "skip", 0
	}
	if !json.Valid([]byte(text)) {
		return bad, 0
	}
	dec := json.NewDecoder(strings.NewReader(text))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return bad, 0
	}
	m, ok := v.(map[string]any)
	if !ok {
		return "corrupt", 0
	}
	isStr := func(k string) bool { _, ok := m[k].(string); return ok }
	isNum := func(k string) bool { _, ok := m[k].(json.Number); return ok }
	absentOrStr := func(k string) bool { _, has := m[k]; return !has || isStr(k) }
	isNullOr := func(k string, f func(string) bool) bool { x, has := m[k]; return has && (x == nil || f(k)) }
	intentOK := func() bool {
		for _, k := range []string{"idempotencyKey", "runId", "spanId", "tool", "argsHash", "executor", "workdir"} {
			if !isStr(k) {
				return false
			}
		}
		return isNum("startedAt") && absentOrStr("attemptId")
	}
	num := func(k string) float64 { f, _ := strconv.ParseFloat(string(m[k].(json.Number)), 64); return f }
	switch m["phase"] {
	case "intent":
		if intentOK() {
			return "intent", num("startedAt")
		}
	case "outcome":
		oc, _ := m["outcome"].(string)
		if intentOK() && isNum("durationMs") && (oc == "ok" || oc == "error" || oc == "timeout") &&
			isNullOr("exitCode", isNum) && isNullOr("signal", isStr) {
			return "outcome", num("startedAt")
		}
	case "torn":
		if isStr("bytes") && isNum("recoveredAt") && absentOrStr("bytesBase64") && absentOrStr("sha256") {
			return "torn", 0
		}
	}
	return "corrupt", 0
}

// classify lists what Scan made of each line, in line order.
func classify(res *ScanResult) map[int]string {
	got := map[int]string{}
	for _, in := range res.Intents {
		got[in.At.Line] = "intent"
	}
	for _, o := range res.Outcomes {
		got[o.At.Line] = "outcome"
	}
	for _, tr := range res.Torn {
		got[tr.At.Line] = "torn"
	}
	for _, c := range res.Corrupt {
		got[c.Line] = "corrupt"
	}
	for _, tt := range res.TornTails {
		got[tt.At.Line] = "tail"
	}
	return got
}

// fuzzFile writes data over the one ledger file of this fuzzing process,
// in place. Reusing the file, not a fresh directory per input, matters: on
// this ext4 host creating and removing an inode costs 0.15-0.2 ms of
// allocator search (find_inode_bit, recently_deleted), and a directory per
// input held FuzzRepair near 100 executions per second. Nor is the file
// truncated to zero first: ext4 (auto_da_alloc) then writes it out at the
// next close, 0.36 ms instead of 4 us.
func fuzzFile(t *testing.T, path string, data []byte) string {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(data, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(int64(len(data))); err != nil {
		t.Fatal(err)
	}
	return path
}

// chunked hands out data at most n bytes per Read, as a ledger that grows
// while it is read can.
type chunked struct {
	data []byte
	n    int
}

func (c *chunked) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	k := copy(p[:min(len(p), c.n)], c.data)
	c.data = c.data[k:]
	return k, nil
}

// FuzzScan fuzzes the scanner in memory (no file per input: the file-level
// path is FuzzRepair's), against the oracle line by line, and read in one
// piece and in small chunks alike.
func FuzzScan(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		res, err := scan("fuzz", bytes.NewReader(data), int64(len(data)), scanConfig{tolerate: true})
		if err != nil {
			t.Fatalf("tolerant scan: %v", err)
		}
		got := classify(res)
		starts := map[int]float64{}
		for _, in := range res.Intents {
			starts[in.At.Line] = float64(in.StartedAt)
		}
		want := map[int]string{}
		lineNo := 0
		rest := data
		for len(rest) > 0 {
			lineNo++
			i := bytes.IndexByte(rest, '\n')
			line, terminated := rest, false
			if i >= 0 {
				line, terminated, rest = rest[:i], true, rest[i+1:]
			} else {
				rest = nil
			}
			class, at := oracle(line, terminated)
			if class != "skip" {
				want[lineNo] = class
			}
			if class == "intent" && starts[lineNo] != at {
				t.Fatalf("line %d: startedAt %v, oracle %v", lineNo, starts[lineNo], at)
			}
		}
		if len(got) != len(want) {
			t.Fatalf("scan %v, oracle %v", got, want)
		}
		for l, c := range want {
			if got[l] != c {
				t.Fatalf("line %d: scan says %q, oracle %q (all: %v vs %v)", l, got[l], c, got, want)
			}
		}
		// Chunk boundaries anywhere, and a size hint that is wrong, change
		// nothing.
		step := 1 + len(data)%13
		again, err := scan("fuzz", &chunked{data: data, n: step}, 0, scanConfig{tolerate: true})
		if err != nil {
			t.Fatalf("chunked scan: %v", err)
		}
		if !reflect.DeepEqual(res, again) {
			t.Fatalf("read %d bytes at a time, the scan differs:\n%+v\n%+v", step, res, again)
		}
		_, strictErr := scan("fuzz", bytes.NewReader(data), int64(len(data)), scanConfig{})
		var ce *CorruptionError
		if (len(res.Corrupt) > 0) != errors.As(strictErr, &ce) {
			t.Fatalf("strict scan error %v with %d corrupt lines", strictErr, len(res.Corrupt))
		}
	})
}

func FuzzRepair(f *testing.F) {
	ledger := filepath.Join(f.TempDir(), "effects.jsonl")
	f.Fuzz(func(t *testing.T, data []byte) {
		path := fuzzFile(t, ledger, data)
		l, err := Open(path, WithNow(func() Millis { return 7 }))
		if err != nil {
			var fe *FileError
			if !errors.As(err, &fe) || fe.Problem != ProblemNotLedger {
				t.Fatalf("Open: %v", err)
			}
			if got, _ := os.ReadFile(path); !bytes.Equal(got, data) {
				t.Fatal("a refused file was modified")
			}
			return
		}
		defer l.Close()
		in := intentFor("fuzz", "fuzz-attempt", 1)
		if err := l.Intent(context.Background(), in); err != nil {
			t.Fatalf("Intent: %v", err)
		}
		after, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		boundary := bytes.LastIndexByte(data, '\n') + 1
		if !bytes.HasPrefix(after, data[:boundary]) {
			t.Fatal("repair lost a terminated row")
		}
		row := intentLine(t, in)
		if !bytes.HasSuffix(after, []byte(row)) {
			t.Fatalf("the new row is not the last line: %q", after)
		}
		frag := data[boundary:]
		middle := after[boundary : len(after)-len(row)]
		switch {
		case len(frag) == 0:
			if len(middle) != 0 {
				t.Fatalf("a clean file grew more than the row: %q", middle)
			}
		case parseable(frag):
			if !bytes.Equal(middle, append(frag, '\n')) {
				t.Fatalf("a parseable tail must be terminated in place: %q", middle)
			}
		default:
			res := mustScan(t, path, Tolerate())
			if len(res.Torn) == 0 || len(res.TornTails) != 0 {
				t.Fatalf("want a quarantine row and no live tail: %+v", res)
			}
			got, err := res.Torn[len(res.Torn)-1].Fragment()
			if err != nil || !bytes.Equal(got, frag) {
				t.Fatalf("quarantined %q (%v), want %q", got, err, frag)
			}
		}
		res := mustScan(t, path, Tolerate())
		if n := len(res.Intents); n == 0 || res.Intents[n-1].Intent != in {
			t.Fatal("the appended intent does not scan back")
		}
	})
}
