package conformance_test

import (
	"encoding/base64"
	"encoding/json"
	"os"
	"testing"

	"github.com/moat-sandbox/moat/conformance"
	"github.com/moat-sandbox/moat/executor"
)

// argsHashVectors is testdata/argshash.json: expected values computed by
// running the reference's own hashArgs (its source field says how), never
// by moat.
type argsHashVectors struct {
	Source  string `json:"source"`
	Vectors []struct {
		Name        string `json:"name"`
		Input       string `json:"input"`
		InputBase64 string `json:"inputBase64"` // for bytes that are not UTF-8
		Canonical   string `json:"canonical"`
		SHA256      string `json:"sha256"`
	} `json:"vectors"`
	Refused []struct {
		Name  string `json:"name"`
		Input string `json:"input"`
	} `json:"refused"`
}

func loadArgsHashVectors(t *testing.T) argsHashVectors {
	t.Helper()
	b, err := os.ReadFile("testdata/argshash.json")
	if err != nil {
		t.Fatal(err)
	}
	var v argsHashVectors
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	if len(v.Vectors) == 0 || len(v.Refused) == 0 {
		t.Fatal("testdata/argshash.json holds no vectors")
	}
	return v
}

// TestArgsHashGoldenVectors: HashArgs hashes what the reference hashes, to
// the reference's digest: duplicate members (last wins), lone surrogates,
// UTF-16 key order, numbers beyond the double range, ill-formed UTF-8 as
// Node decodes it, and the contract's section 13 vectors.
func TestArgsHashGoldenVectors(t *testing.T) {
	for _, v := range loadArgsHashVectors(t).Vectors {
		in := []byte(v.Input)
		if v.InputBase64 != "" {
			var err error
			if in, err = base64.StdEncoding.DecodeString(v.InputBase64); err != nil {
				t.Fatal(err)
			}
		}
		got, err := executor.HashArgs(in)
		if err != nil {
			t.Errorf("%s: HashArgs(%q) refused what the reference hashes: %v", v.Name, in, err)
			continue
		}
		if got != v.SHA256 {
			t.Errorf("%s: HashArgs(%q) = %s, want the reference's %s (canonical text %s)", v.Name, in, got, v.SHA256, v.Canonical)
		}
	}
}

// TestArgsHashRefusesWhatJSONParseRefuses: text the reference's JSON.parse
// throws on is a typed refusal, not a hash.
func TestArgsHashRefusesWhatJSONParseRefuses(t *testing.T) {
	for _, v := range loadArgsHashVectors(t).Refused {
		if got, err := executor.HashArgs([]byte(v.Input)); err == nil {
			t.Errorf("%s: HashArgs(%q) = %s; JSON.parse refuses it", v.Name, v.Input, got)
		}
	}
}

// TestReferenceData: the embedded reference postures and verdicts are
// there and well formed.
func TestReferenceData(t *testing.T) {
	ps, fs := conformance.ReferencePostures(), conformance.ReferenceFloor()
	if len(ps) == 0 || len(fs) == 0 {
		t.Fatal("no reference postures or verdicts")
	}
	for _, p := range ps {
		if !json.Valid([]byte(p.Descriptor)) || len(p.Fingerprint) != 64 {
			t.Errorf("%s: descriptor %q, fingerprint %q", p.Name, p.Descriptor, p.Fingerprint)
		}
	}
	for _, f := range fs {
		if f.Verdict != "accepted" && (f.Verdict != "refused" || f.Field == "" || f.Requirement == "") {
			t.Errorf("%s: verdict %+v", f.Name, f)
		}
	}
}
