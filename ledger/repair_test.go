package ledger

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"unicode/utf8"
)

// The writer-side cases of ledger.test.ts, and the golden torn row of
// contract section 13.

func fixedNow(m Millis) Option { return WithNow(func() Millis { return m }) }

func TestAppendAfterTornTailQuarantinesFragment(t *testing.T) {
	first := intentFor("k1", "a-1", 1000)
	frag := `{"phase":"intent","idempotencyKey":"tor`
	path := writeLedger(t, intentLine(t, first)+frag)
	l := mustOpen(t, path, fixedNow(4242))
	second := intentFor("k2", "a-2", 2000)
	mustIntent(t, l, second)

	res := mustScan(t, path)
	if len(res.Intents) != 2 || res.Intents[0].Intent != first || res.Intents[1].Intent != second {
		t.Fatalf("both intents must be visible: %+v", res.Intents)
	}
	if len(res.Torn) != 1 || len(res.TornTails) != 0 {
		t.Fatalf("want one quarantine row and no live tail: %+v", res)
	}
	torn := res.Torn[0]
	if torn.RecoveredAt != 4242 || torn.Bytes != frag || torn.At.Line != 2 {
		t.Fatalf("torn row %+v", torn)
	}
	if got, err := torn.Fragment(); err != nil || string(got) != frag {
		t.Fatalf("fragment %q, %v", got, err)
	}
	if _, err := os.Stat(path + ".repair-lock"); !os.IsNotExist(err) {
		t.Fatalf("the lock must be gone: %v", err)
	}
}

func TestCompleteUnterminatedRowIsTerminatedInPlace(t *testing.T) {
	first := intentFor("k1", "a-1", 1000)
	unterminated := strings.TrimSuffix(intentLine(t, first), "\n")
	path := writeLedger(t, unterminated)
	l := mustOpen(t, path)
	second := intentFor("k2", "a-2", 2000)
	mustIntent(t, l, second)
	if got, want := readFile(t, path), unterminated+"\n"+intentLine(t, second); got != want {
		t.Fatalf("file\n%q\nwant\n%q", got, want)
	}
}

func TestRepairIsLazyAndCleanFileUntouched(t *testing.T) {
	first := intentFor("k1", "a-1", 1000)
	path := writeLedger(t, intentLine(t, first))
	before := readFile(t, path)
	l := mustOpen(t, path)
	if readFile(t, path) != before {
		t.Fatal("Open must not touch the file")
	}
	second := intentFor("k2", "a-2", 2000)
	mustIntent(t, l, second)
	l2 := mustOpen(t, path)
	third := intentFor("k3", "a-3", 3000)
	mustIntent(t, l2, third)
	if got := readFile(t, path); got != before+intentLine(t, second)+intentLine(t, third) {
		t.Fatalf("appends only, got %q", got)
	}
}

func TestInvalidUTF8FragmentRoundTripsExactly(t *testing.T) {
	frag := "{\"phase\":\"intent\",\"idempotencyKey\":\"torn-\xFF\xFE\x80"
	path := writeLedger(t, frag)
	l := mustOpen(t, path, fixedNow(777))
	mustIntent(t, l, intentFor("k1", "a-1", 1000))
	res := mustScan(t, path)
	if len(res.Torn) != 1 {
		t.Fatalf("want a quarantine row: %+v", res)
	}
	torn := res.Torn[0]
	got, err := torn.Fragment()
	if err != nil || string(got) != frag {
		t.Fatalf("fragment %q %v", got, err)
	}
	if torn.Bytes != lossyDecode([]byte(frag), false) || !strings.HasSuffix(torn.Bytes, "torn-\uFFFD\uFFFD\uFFFD") {
		t.Fatalf("bytes %q", torn.Bytes)
	}
}

// Contract section 13: the golden torn row.
func TestGoldenTornRow(t *testing.T) {
	frag := append([]byte(`{"phase":"intent","idempotencyKey":"torn-`), 0xFF, 0xFE, 0x80)
	row, err := appendTornRow(nil, frag, 777)
	if err != nil {
		t.Fatal(err)
	}
	const (
		b64 = "eyJwaGFzZSI6ImludGVudCIsImlkZW1wb3RlbmN5S2V5IjoidG9ybi3//oA="
		sum = "963153876ba96cd408fd760da6e4d14194091261b4abe70ad079016ea25874e9"
	)
	want := `{"phase":"torn","bytes":"{\"phase\":\"intent\",\"idempotencyKey\":\"torn-` + "\uFFFD\uFFFD\uFFFD" +
		`","bytesBase64":"` + b64 + `","sha256":"` + sum + `","recoveredAt":777}` + "\n"
	if string(row) != want {
		t.Fatalf("torn row\n%s\nwant\n%s", row, want)
	}
	// And through a real repair.
	path := writeLedger(t, string(frag))
	l := mustOpen(t, path, fixedNow(777))
	mustIntent(t, l, intentFor("k", "a", 1))
	if !strings.HasPrefix(readFile(t, path), want) {
		t.Fatalf("repaired file starts %q", readFile(t, path))
	}
}

func TestFragmentParseableOnlyWhenLossyIsQuarantined(t *testing.T) {
	frag := "{\"a\":\"\xFF\"}"
	path := writeLedger(t, intentLine(t, intentFor("k1", "a-1", 1))+frag)
	l := mustOpen(t, path, fixedNow(1))
	mustIntent(t, l, intentFor("k2", "a-2", 2))
	res := mustScan(t, path)
	if len(res.Torn) != 1 || len(res.Intents) != 2 {
		t.Fatalf("want the fragment quarantined: %+v", res)
	}
	if got, _ := res.Torn[0].Fragment(); string(got) != frag {
		t.Fatalf("fragment %q", got)
	}
}

func TestNonLedgerFragmentParseableIsTerminated(t *testing.T) {
	// Any JSON value counts as parseable (8.5 f), so a "42" fragment after
	// a valid first row is terminated, and then reads as corruption.
	path := writeLedger(t, intentLine(t, intentFor("k1", "a-1", 1))+"42")
	l := mustOpen(t, path)
	mustIntent(t, l, intentFor("k2", "a-2", 2))
	res := mustScan(t, path, Tolerate())
	if len(res.Corrupt) != 1 || res.Corrupt[0].Line != 2 || len(res.Torn) != 0 {
		t.Fatalf("%+v", res)
	}
}

func TestEncoderMatchesJSONStringify(t *testing.T) {
	sig := "SIGKILL"
	r := Record{
		Intent:     Intent{IdempotencyKey: "k<>&\u2028\u2029\x01\"\\/é😀", RunID: "r", SpanID: "s", Tool: "t", ArgsHash: "h", Executor: "e", Workdir: "/w", StartedAt: -0.0, AttemptID: "a"},
		DurationMs: 1e21, Outcome: OutcomeTimeout, Signal: &sig,
	}
	got := recordLine(t, r)
	want := `{"phase":"outcome","idempotencyKey":"k<>&` + "\u2028\u2029" + `\u0001\"\\/é😀","runId":"r","spanId":"s","tool":"t",` +
		`"argsHash":"h","executor":"e","workdir":"/w","startedAt":0,"attemptId":"a","durationMs":1e+21,"outcome":"timeout","exitCode":null,"signal":"SIGKILL"}` + "\n"
	if got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
	for v, want := range map[float64]string{1e-7: "1e-7", 1e-6: "0.000001", 0.1: "0.1", 100: "100", 1.5: "1.5", 1755000000123: "1755000000123", 123e-20: "1.23e-18"} {
		if got := string(appendJSNumber(nil, v)); got != want {
			t.Errorf("number %v: got %s want %s", v, got, want)
		}
	}
}

func TestEncoderRefusesWhatWouldBeCorrupt(t *testing.T) {
	bad := []Intent{
		{IdempotencyKey: "k\xff", StartedAt: 1},
		{IdempotencyKey: "k", StartedAt: Millis(posInf())},
	}
	for _, in := range bad {
		if _, err := appendIntentRow(nil, &in); err == nil {
			t.Errorf("want a refusal for %+v", in)
		}
	}
	r := Record{Intent: intentFor("k", "a", 1), Outcome: "aborted"}
	if _, err := appendRecordRow(nil, &r); err == nil {
		t.Error("an unknown outcome class must be refused")
	}
}

func posInf() float64 { var z float64; return 1 / z }

func TestLossyDecodeMaximalSubparts(t *testing.T) {
	cases := map[string]string{
		"a\xE2\x82b":          "a\uFFFDb",           // truncated 3-byte sequence: one replacement
		"\xF0\x9F\x98":        "\uFFFD",             // truncated 4-byte at the end
		"\xC0\xAF":            "\uFFFD\uFFFD",       // overlong lead is invalid on its own
		"\xED\xA0\x80":        "\uFFFD\uFFFD\uFFFD", // a surrogate
		"\xEF\xBB\xBFx":       "\uFEFFx",            // BOM kept, as Buffer.toString keeps it
		"ok \xF4\x90\x80\x80": "ok \uFFFD\uFFFD\uFFFD\uFFFD",
	}
	for in, want := range cases {
		if got := lossyDecode([]byte(in), false); got != want {
			t.Errorf("lossyDecode(%q) = %q, want %q", in, got, want)
		}
	}
	if !utf8.ValidString(lossyDecode([]byte("\xff\xfe"), false)) {
		t.Error("lossy output must be valid UTF-8")
	}
}

func TestPreviewCountsUTF16Units(t *testing.T) {
	s := strings.Repeat("a", 119) + "😀tail"
	if got := preview(s); got != Text(strings.Repeat("a", 119)+"\xed\xa0\xbd") {
		t.Fatalf("a pair cut in half keeps its high surrogate U+D83D, as slice(0, 120) does: %q", got)
	}
	s = strings.Repeat("😀", 70)
	if got := preview(s); got != Text(strings.Repeat("😀", 60)) {
		t.Fatalf("60 pairs are 120 units, got %d runes", utf8.RuneCountInString(string(got)))
	}
}

// TestPreviewEndingInsideAnEmojiIsTheReferences: a corrupt line and a torn
// tail whose 120th unit is the high half of an emoji have the reference's
// previews, in JSON as its loadEffectLedger's JSON.stringify writes them
// (run on the same file): "{", 118 "x" and "\ud83d", 120 units.
func TestPreviewEndingInsideAnEmojiIsTheReferences(t *testing.T) {
	line := "{" + strings.Repeat("x", 118) + "😀 rest}"
	res := mustScan(t, writeLedger(t, line+"\n"+line), Tolerate())
	if len(res.Corrupt) != 1 || len(res.TornTails) != 1 {
		t.Fatalf("corrupt %d, torn tails %d; want 1 and 1", len(res.Corrupt), len(res.TornTails))
	}
	reference := `"{` + strings.Repeat("x", 118) + `\ud83d"`
	for _, p := range []Text{res.Corrupt[0].Preview, res.TornTails[0].Preview} {
		got, err := p.MarshalJSON()
		if err != nil || string(got) != reference {
			t.Fatalf("preview JSON %s (%v), the reference's %s", got, err, reference)
		}
	}
	b, _ := json.Marshal(res.Corrupt[0])
	if !strings.HasSuffix(string(b), `\ud83d"}`) {
		t.Fatalf("corrupt line JSON %s does not end with the reference's lone surrogate", b)
	}
}

// TestTextJSON: Text writes what JSON.stringify writes for the JS string
// it stands for: escapes as the reference's rows have them (<&> and U+2028
// raw, control characters \u00xx), a lone surrogate as \udxxx, any other
// byte that is not UTF-8 as a raw U+FFFD.
func TestTextJSON(t *testing.T) {
	for _, tc := range []struct {
		in   Text
		want string
	}{
		{"plain <&> \u2028", "\"plain <&> \u2028\""},
		{"ctl \x07 \" \\", `"ctl \u0007 \" \\"`},
		{"\xed\xb0\x80 low", `"\udc00 low"`},
		{"bad \xff", "\"bad \ufffd\""},
		{"😀", `"😀"`},
	} {
		got, err := tc.in.MarshalJSON()
		if err != nil || string(got) != tc.want {
			t.Errorf("%q: %s (%v), want %s", tc.in, got, err, tc.want)
		}
	}
}

func TestCorruptLineSHA256CoversRawBytes(t *testing.T) {
	line := "\xEF\xBB\xBF{bad"
	res := mustScan(t, writeLedger(t, line+"\n"), Tolerate())
	sum := sha256.Sum256([]byte(line))
	if res.Corrupt[0].SHA256 != hex.EncodeToString(sum[:]) || res.Corrupt[0].Preview != "{bad" {
		t.Fatalf("%+v", res.Corrupt[0])
	}
	if !bytes.Equal([]byte(res.Corrupt[0].Preview), []byte("{bad")) {
		t.Fatal("the BOM of a valid line is consumed in the preview")
	}
}
