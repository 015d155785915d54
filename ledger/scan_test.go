package ledger

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strings"
	"testing"
)

// The cases of the reference's ledger.test.ts that concern scanning and
// pairing (contract section 11).

func TestScanPairsIntentAndOutcomeByAttempt(t *testing.T) {
	in := intentFor("k1", "a-1", 1000)
	res := mustScan(t, writeLedger(t, intentLine(t, in)+recordLine(t, recordFor(in, OutcomeOK))))
	if len(res.Intents) != 1 || len(res.Outcomes) != 1 || len(res.Orphans) != 0 ||
		len(res.Corrupt) != 0 || len(res.Torn) != 0 || len(res.TornTails) != 0 {
		t.Fatalf("want one paired attempt and nothing else, got %+v", res)
	}
	if res.Intents[0].Intent != in {
		t.Fatalf("intent round trip: got %+v want %+v", res.Intents[0].Intent, in)
	}
	got := res.Outcomes[0].Record
	if got.Intent != in || got.Outcome != OutcomeOK || *got.ExitCode != 0 || got.Signal != nil || got.DurationMs != 12 {
		t.Fatalf("outcome round trip: %+v", got)
	}
}

func TestScanIntentWithoutOutcomeIsOrphaned(t *testing.T) {
	in := intentFor("k1", "a-1", 1000)
	res := mustScan(t, writeLedger(t, intentLine(t, in)))
	if len(res.Orphans) != 1 {
		t.Fatalf("want one orphan, got %d", len(res.Orphans))
	}
	o := res.Orphans[0]
	if o.IdempotencyKey != "k1" || o.Tool != "charge" || o.ArgsHash != in.ArgsHash || o.RunID != "run-1" || o.At.Line != 1 {
		t.Fatalf("orphan lookup set: %+v", o)
	}
}

func TestScanSiblingOutcomeDoesNotResolveOlderAttempt(t *testing.T) {
	for _, oc := range []Outcome{OutcomeOK, OutcomeError} {
		t.Run(string(oc), func(t *testing.T) {
			old := intentFor("k1", "a-old", 1000)
			sib := intentFor("k1", "a-new", 2000)
			res := mustScan(t, writeLedger(t, intentLine(t, old)+intentLine(t, sib)+recordLine(t, recordFor(sib, oc))))
			if ids := attemptIDs(res.Orphans); !slices.Equal(ids, []string{"a-old"}) {
				t.Fatalf("orphans %v, want [a-old]", ids)
			}
		})
	}
}

func TestScanSameMillisecondAttemptsPairByAttemptID(t *testing.T) {
	a := intentFor("k1", "a-1", 1000)
	b := intentFor("k1", "a-2", 1000)
	res := mustScan(t, writeLedger(t, intentLine(t, a)+intentLine(t, b)+recordLine(t, recordFor(b, OutcomeOK))))
	if ids := attemptIDs(res.Orphans); !slices.Equal(ids, []string{"a-1"}) {
		t.Fatalf("orphans %v, want [a-1]", ids)
	}
}

func TestScanLegacyRowsPairByKeyAndStartedAt(t *testing.T) {
	a := intentFor("k1", "", 1000)
	b := intentFor("k2", "", 2000)
	bOut := recordFor(b, OutcomeOK)
	bOut.StartedAt = 2001 // a different startedAt: not this attempt
	res := mustScan(t, writeLedger(t, intentLine(t, a)+recordLine(t, recordFor(a, OutcomeOK))+intentLine(t, b)+recordLine(t, bOut)))
	if len(res.Orphans) != 1 || res.Orphans[0].IdempotencyKey != "k2" || res.Orphans[0].HasAttemptID {
		t.Fatalf("want only legacy k2 orphaned, got %+v", res.Orphans)
	}
}

func TestScanLegacyAndAttemptClassesNeverCross(t *testing.T) {
	legacy := intentFor("k1", "", 1000)
	modern := intentFor("k1", "a-1", 1000)
	res := mustScan(t, writeLedger(t, intentLine(t, legacy)+intentLine(t, modern)+recordLine(t, recordFor(modern, OutcomeOK))))
	if len(res.Orphans) != 1 || res.Orphans[0].HasAttemptID {
		t.Fatalf("the legacy intent must stay orphaned beside the resolved attempt: %+v", res.Orphans)
	}
	// And a legacy outcome does not resolve a new-style intent.
	res = mustScan(t, writeLedger(t, intentLine(t, modern)+recordLine(t, recordFor(legacy, OutcomeOK))))
	if ids := attemptIDs(res.Orphans); !slices.Equal(ids, []string{"a-1"}) {
		t.Fatalf("orphans %v, want [a-1]", ids)
	}
}

func TestScanOutcomeBeforeIntentStillPairs(t *testing.T) {
	in := intentFor("k1", "a-1", 1000)
	res := mustScan(t, writeLedger(t, recordLine(t, recordFor(in, OutcomeOK))+intentLine(t, in)))
	if len(res.Orphans) != 0 {
		t.Fatalf("want no orphans, got %v", attemptIDs(res.Orphans))
	}
}

func TestScanLiveTornTail(t *testing.T) {
	in := intentFor("k1", "a-1", 1000)
	res := mustScan(t, writeLedger(t, intentLine(t, in)+`{"phase":"intent","idempotencyKey":"tor`))
	if len(res.TornTails) != 1 || !strings.Contains(string(res.TornTails[0].Preview), `"idempotencyKey":"tor`) {
		t.Fatalf("want a torn tail with the fragment, got %+v", res.TornTails)
	}
	if res.TornTails[0].At.Line != 2 || len(res.Corrupt) != 0 || len(res.Intents) != 1 {
		t.Fatalf("torn tail: %+v", res)
	}
}

func TestScanInteriorGarbageIsCorruption(t *testing.T) {
	in := intentFor("k1", "a-1", 1000)
	_, err := Scan(writeLedger(t, "{malformed}\n"+intentLine(t, in)))
	ce := corruptionOf(t, err)
	sum := sha256.Sum256([]byte("{malformed}"))
	want := CorruptLine{Line: 1, Offset: 0, SHA256: hex.EncodeToString(sum[:]), Preview: "{malformed}"}
	got := ce.Lines[0]
	got.File = ""
	if len(ce.Lines) != 1 || got != want {
		t.Fatalf("corrupt lines %+v, want [%+v]", ce.Lines, want)
	}
	if !strings.Contains(err.Error(), "has 1 corrupt line(s); first at line 1, byte 0, sha256 "+want.SHA256) {
		t.Fatalf("message: %v", err)
	}
}

func TestScanTolerateReturnsCorruptLines(t *testing.T) {
	first := intentLine(t, intentFor("k1", "a-1", 1000))
	res := mustScan(t, writeLedger(t, first+"not json\n"), Tolerate())
	if len(res.Corrupt) != 1 || res.Corrupt[0].Line != 2 || res.Corrupt[0].Offset != int64(len(first)) {
		t.Fatalf("corrupt %+v, want line 2 at offset %d", res.Corrupt, len(first))
	}
	if len(res.Orphans) != 1 {
		t.Fatalf("the valid row must still be scanned: %+v", res)
	}
}

func TestScanLegacyTornRow(t *testing.T) {
	res := mustScan(t, writeLedger(t, `{"phase":"torn","bytes":"{\"pha","recoveredAt":5}`+"\n"))
	if len(res.Torn) != 1 {
		t.Fatalf("want one torn row, got %+v", res)
	}
	got := res.Torn[0]
	if got.Bytes != `{"pha` || got.RecoveredAt != 5 || got.BytesBase64 != "" || got.SHA256 != "" {
		t.Fatalf("legacy torn row: %+v", got)
	}
	if _, err := got.Fragment(); err == nil {
		t.Fatal("Fragment of a legacy row must fail")
	}
}

// Each of these lines is corruption, terminated or not, in both modes.
func TestScanShapeViolationsAreCorruption(t *testing.T) {
	good := intentFor("k1", "a-1", 1000)
	cases := map[string]string{
		"invalid utf8":        "{\"a\":\"\xC3\x28\"}",
		"null":                "null",
		"missing fields":      `{"phase":"intent","idempotencyKey":"k"}`,
		"unknown phase":       strings.Replace(strings.TrimSuffix(intentLine(t, good), "\n"), `"intent"`, `"Intent"`, 1),
		"torn bytes number":   `{"phase":"torn","bytes":7,"recoveredAt":1}`,
		"attemptId null":      strings.Replace(strings.TrimSuffix(intentLine(t, good), "\n"), `"a-1"`, `null`, 1),
		"startedAt string":    strings.Replace(strings.TrimSuffix(intentLine(t, good), "\n"), `1000`, `"1000"`, 1),
		"outcome bad class":   strings.Replace(strings.TrimSuffix(recordLine(t, recordFor(good, OutcomeOK)), "\n"), `"ok"`, `"OK"`, 1),
		"exitCode string":     strings.Replace(strings.TrimSuffix(recordLine(t, recordFor(good, OutcomeOK)), "\n"), `"exitCode":0`, `"exitCode":"0"`, 1),
		"signal missing":      strings.Replace(strings.TrimSuffix(recordLine(t, recordFor(good, OutcomeOK)), "\n"), `,"signal":null`, ``, 1),
		"duplicate key later": strings.Replace(strings.TrimSuffix(intentLine(t, good), "\n"), `}`, `,"phase":"bogus"}`, 1),
	}
	for name, line := range cases {
		t.Run(name, func(t *testing.T) {
			ce := corruptionOf(t, scanErr(writeLedger(t, line+"\n")))
			if len(ce.Lines) != 1 || ce.Lines[0].Line != 1 {
				t.Fatalf("lines %+v", ce.Lines)
			}
			res := mustScan(t, writeLedger(t, line+"\n"), Tolerate())
			if got := lines(res); !slices.Equal(got, []int{1}) || len(res.Intents)+len(res.Outcomes)+len(res.Torn) != 0 {
				t.Fatalf("tolerant scan admitted a corrupt line: %+v", res)
			}
		})
	}
}

func scanErr(path string) error {
	_, err := Scan(path)
	return err
}

func TestScanNullLinePreview(t *testing.T) {
	res := mustScan(t, writeLedger(t, "null\n"), Tolerate())
	if len(res.Corrupt) != 1 || res.Corrupt[0].Preview != "null" {
		t.Fatalf("corrupt %+v", res.Corrupt)
	}
}

func TestScanPrimitivesAreCorruptionInOrder(t *testing.T) {
	res := mustScan(t, writeLedger(t, "42\n\"str\"\ntrue\n[]\n"), Tolerate())
	var previews []string
	for _, c := range res.Corrupt {
		previews = append(previews, string(c.Preview))
	}
	if !slices.Equal(previews, []string{"42", `"str"`, "true", "[]"}) || !slices.Equal(lines(res), []int{1, 2, 3, 4}) {
		t.Fatalf("corrupt %+v", res.Corrupt)
	}
}

func TestScanUnterminatedBadShapeIsCorruptionNotTornTail(t *testing.T) {
	res := mustScan(t, writeLedger(t, `{"phase":"intent"}`), Tolerate())
	if len(res.TornTails) != 0 || !slices.Equal(lines(res), []int{1}) {
		t.Fatalf("want corruption and no torn tail: %+v", res)
	}
}

func TestScanUnterminatedInvalidUTF8IsTornTail(t *testing.T) {
	res := mustScan(t, writeLedger(t, "{\"phase\":\"intent\",\"x\":\"\xE2\x82"))
	if len(res.TornTails) != 1 || len(res.Corrupt) != 0 {
		t.Fatalf("want a torn tail: %+v", res)
	}
	// The WHATWG decoder turns the truncated sequence into ONE U+FFFD.
	if want := "{\"phase\":\"intent\",\"x\":\"\uFFFD"; string(res.TornTails[0].Preview) != want {
		t.Fatalf("preview %q, want %q", res.TornTails[0].Preview, want)
	}
}

func TestScanMixedFileCollectsEveryCorruptLine(t *testing.T) {
	a := intentFor("k1", "a-1", 1000)
	b := intentFor("k2", "a-2", 2000)
	content := intentLine(t, a) + "garbage\n" + recordLine(t, recordFor(a, OutcomeOK)) + "[1]\n" + "{\"phase\":\"torn\"}\n" + intentLine(t, b)
	_, err := Scan(writeLedger(t, content))
	ce := corruptionOf(t, err)
	var got []int
	for _, l := range ce.Lines {
		got = append(got, l.Line)
	}
	if !slices.Equal(got, []int{2, 4, 5}) {
		t.Fatalf("corrupt lines %v, want [2 4 5]", got)
	}
	res := mustScan(t, writeLedger(t, content), Tolerate())
	if ids := attemptIDs(res.Orphans); !slices.Equal(ids, []string{"a-2"}) {
		t.Fatalf("orphans %v, want [a-2]", ids)
	}
}

func TestScanBlankLinesCountButAreSkipped(t *testing.T) {
	in := intentFor("k1", "a-1", 1000)
	res := mustScan(t, writeLedger(t, "\n  \t\r\n\uFEFF\u00a0\u3000\n"+intentLine(t, in)+"\n"))
	if len(res.Intents) != 1 || res.Intents[0].At.Line != 4 || res.Intents[0].At.Offset != int64(len("\n  \t\r\n\uFEFF\u00a0\u3000\n")) {
		t.Fatalf("intent at %+v", res.Intents[0].At)
	}
	// U+0085 is not ECMAScript whitespace: that line is corruption.
	if _, err := Scan(writeLedger(t, "\u0085\n")); err == nil {
		t.Fatal("a U+0085 line must be corruption")
	}
}

func TestScanBOMAndCRAreTolerated(t *testing.T) {
	in := intentFor("k1", "a-1", 1000)
	line := strings.TrimSuffix(intentLine(t, in), "\n")
	res := mustScan(t, writeLedger(t, "\uFEFF"+line+"\r\n"))
	if len(res.Intents) != 1 || res.Intents[0].Intent != in {
		t.Fatalf("BOM and CR: %+v", res)
	}
}

func TestScanKeepsExtraMembersAndEscapes(t *testing.T) {
	line := `{"phase":"intent","idempotencyKey":"k\u0031","runId":"r","spanId":"s","tool":"t","argsHash":"h",` +
		`"executor":"e","workdir":"/w","startedAt":1.5e3,"attemptId":"a","x":{"deep":[1,2,{"y":null}]},"x":[true],"n":-0}` + "\n"
	res := mustScan(t, writeLedger(t, line))
	in := res.Intents[0]
	if in.IdempotencyKey != "k1" || in.StartedAt != 1500 || string(in.Extra["x"]) != "[true]" || string(in.Extra["n"]) != "-0" || len(in.Extra) != 2 {
		t.Fatalf("row %+v extra %v", in.Intent, in.Extra)
	}
}

func TestScanMissingFileAndDirectory(t *testing.T) {
	dir := t.TempDir()
	if _, err := Scan(dir + "/nope.jsonl"); err == nil {
		t.Fatal("missing file: want an error")
	}
	var fe *FileError
	if _, err := Scan(dir); !errorsAs(err, &fe) || fe.Problem != ProblemNotRegular {
		t.Fatalf("directory: %v", err)
	}
}
