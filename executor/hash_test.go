package executor

import (
	"encoding/base64"
	"encoding/json"
	"os"
	"testing"
)

// The golden vectors of contract section 13.
func TestHashArgsGolden(t *testing.T) {
	for _, tc := range []struct{ args, want string }{
		{`{}`, "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"},
		{`null`, "74234e98afe7498fb5daf1f36ac2d78acc339464f950703b8c019892f982b90b"},
		{`[]`, "4f53cda18c2baa0c0354bb5f9a3ecbe5ed12ab4d8e11ba873c2f11161202b945"},
		{`"just a string"`, "3fe01def54b1c6cd795b2ebfcbab64150f6a507bce043040c662c682eebfed1e"},
		{`{"path":"/tmp/x"}`, "cb1533f3eb4170695956d87bb17a94f79c8126c59bb60392d71d7e7c20192465"},
		{`{"b":1,"a":[1,"x",null,true]}`, "ecb73d12906ef1ff8df92255f5a2c370ccddf124400ea8f0fa0aa1a82a1fae23"},
		// {a: undefined} cannot come from JSON; its canonical text {"a":null} can.
		{`{"a":null}`, "d091f9c83c091f79652fe8786375b3fe4ce0861a56f5bfbafedbe431877ff0e8"},
		{`{"n":[1e21,1e-7,-0,0.1,100,1.5]}`, "73d50942e0f2ee9512db4900eb15c63f44466008278e33b118ab7aaa4a768a9d"},
		{`{"\uff61":1,"😀":2}`, "c265de3d33291482eef3c7c19e4a939f9e712cd9ce0c5bd3422e1b7651368fb8"},
		{`{"n":12345678901234567890,"f":1.0,"e":1E2,"B":1,"a":[{"y":1,"x":2}],"10":0,"9":0}`, "8bbbc952988559bb2ef8ed656a720b6ece81d7b8fdc1c24ae2ef4767ad677a50"},
		{`{"behavior":"echo","payload":{"hello":"world","n":7}}`, "d7e719fc294804413ed8198ecf377cb470d77951634f7f8d2ffab7a82b8b04ba"},
		{``, "74234e98afe7498fb5daf1f36ac2d78acc339464f950703b8c019892f982b90b"}, // absent args hash as null
	} {
		got, err := HashArgs(json.RawMessage(tc.args))
		if err != nil {
			t.Errorf("HashArgs(%s): %v", tc.args, err)
			continue
		}
		if got != tc.want {
			t.Errorf("HashArgs(%s) = %s, want %s", tc.args, got, tc.want)
		}
	}
}

func TestHashArgsCanonicalText(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"b":1,"a":[1,"x",null,true]}`, `{"a":[1,"x",null,true],"b":1}`},
		{`{"n":[1e21,1e-7,-0,0.1,100,1.5]}`, `{"n":[1e+21,1e-7,0,0.1,100,1.5]}`},
		{`{"\uff61":1,"😀":2}`, `{"😀":2,"｡":1}`},
		{`{"n":12345678901234567890,"f":1.0,"e":1E2,"B":1,"a":[{"y":1,"x":2}],"10":0,"9":0}`, `{"10":0,"9":0,"B":1,"a":[{"x":2,"y":1}],"e":100,"f":1,"n":12345678901234567000}`},
		{`"\u2028<&>"`, "\"\u2028<&>\""},
	} {
		got, err := canonical([]byte(tc.in))
		if err != nil || string(got) != tc.want {
			t.Errorf("canonical(%s) = %s, %v; want %s", tc.in, got, err, tc.want)
		}
	}
}

func TestHashArgsRefusesInvalidJSON(t *testing.T) {
	if _, err := HashArgs(json.RawMessage(`{"a":`)); err == nil {
		t.Fatal("HashArgs accepted truncated JSON")
	}
}

func TestDeriveKeyGolden(t *testing.T) {
	args := json.RawMessage(`{"b":[1,"x"],"a":{"z":null,"y":0.5}}`)
	for _, tc := range []struct {
		name    string
		version int
		in      KeyInput
		want    string
	}{
		{"v1 legacy", 1, KeyInput{RunID: "exec-key-legacy", AgentSeq: 1, Ordinal: 1, Tool: "charge", Args: json.RawMessage(`{}`)}, "7dd81bb525fa3960fc6fda0a064694b08a52b585240b0890b849b3fcdd080ea4"},
		{"absent is v1", 0, KeyInput{RunID: "exec-key-legacy", AgentSeq: 1, Ordinal: 1, Tool: "charge", Args: json.RawMessage(`{}`)}, "7dd81bb525fa3960fc6fda0a064694b08a52b585240b0890b849b3fcdd080ea4"},
		{"v1 args", 1, KeyInput{RunID: "run-1", AgentSeq: 7, Ordinal: 2, Tool: "echo_tool", Args: args}, "e39f8ff3d1c1a49a61cf676148983cd1816af4ff7d6f969b5722c2e746cdb8dc"},
		{"v2 legacy", 2, KeyInput{RunID: "exec-key-legacy", Genesis: "GGGGGGGGGGGGGGGGGGGGGGGGGG", AgentSeq: 1, Ordinal: 1, Tool: "charge", Args: json.RawMessage(`{}`)}, "78da4d97b7b0d081692d381188e626b51ff05133f7bcf041c24b20e56f8ac977"},
		{"v2 args", 2, KeyInput{RunID: "run-1", Genesis: "01J0000000000000000000000A", AgentSeq: 7, Ordinal: 2, Tool: "echo_tool", Args: args}, "6da74dd1ee6a1d238910e4c72acaf8a6a7ca52311eb07a126701b1ed1612078d"},
		// Computed by running the reference's deriveExecIdempotencyKey(V2)
		// (core runtime/executor.ts, 1.248.0) on JSON.parse of the args.
		{"v1 duplicate member", 1, KeyInput{RunID: "run-1", AgentSeq: 7, Ordinal: 2, Tool: "echo_tool", Args: json.RawMessage(`{"a":1,"a":2}`)}, "bc84479acb7962f907d9b6993a2d33d486ca2bf5d702db01ad93ffe330cbfdb7"},
		{"v2 duplicate member", 2, KeyInput{RunID: "run-1", Genesis: "01J0000000000000000000000A", AgentSeq: 7, Ordinal: 2, Tool: "echo_tool", Args: json.RawMessage(`{"a":1,"a":2}`)}, "48a47ddc3b2e9e8f054c1498560b64ab860eb9975a852bc0ca073318c7b900ed"},
		{"v1 lone surrogate", 1, KeyInput{RunID: "run-1", AgentSeq: 7, Ordinal: 2, Tool: "echo_tool", Args: json.RawMessage(`"\ud800"`)}, "a7c4b6fceb90e934c5c205bde0bd2fbd0d6945c45ea49cdee374448e3e34b5de"},
		{"v2 lone surrogate", 2, KeyInput{RunID: "run-1", Genesis: "01J0000000000000000000000A", AgentSeq: 7, Ordinal: 2, Tool: "echo_tool", Args: json.RawMessage(`"\ud800"`)}, "68e6c08635de13fb880a61c3554d6edb049986490b12cf3a390fb5444a521102"},
	} {
		got, err := DeriveKey(tc.version, tc.in)
		if err != nil || got != tc.want {
			t.Errorf("%s: DeriveKey = %s, %v; want %s", tc.name, got, err, tc.want)
		}
	}
}

func TestDeriveKeyProperties(t *testing.T) {
	base := KeyInput{RunID: "r", Genesis: "01J0000000000000000000000A", AgentSeq: 3, Ordinal: 1, Tool: "t", Args: json.RawMessage(`{}`)}
	k := func(in KeyInput) string {
		s, err := DeriveKey(2, in)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	second := base
	second.Ordinal = 2
	otherAgent := base
	otherAgent.AgentSeq = 4
	recreated := base
	recreated.Genesis = "01J0000000000000000000000B"
	if k(base) == k(second) || k(base) == k(otherAgent) || k(base) == k(recreated) {
		t.Fatal("keys collide across ordinal, agentSeq or genesis")
	}
	if k(base) != k(base) {
		t.Fatal("the same call derived two keys")
	}
	v1, _ := DeriveKey(1, base)
	if v1 == k(base) {
		t.Fatal("v1 and v2 keys are not domain-separated")
	}
}

// The reference's core JCS throws "JCS: non-finite numbers are not JSON" on
// args JSON.parse reads as Infinity (hashArgs writes them as null).
func TestDeriveKeyRefusesWhatTheReferenceJCSRefuses(t *testing.T) {
	_, err := DeriveKey(2, KeyInput{RunID: "r", Genesis: "G", Tool: "t", Args: json.RawMessage(`{"n":[1e400]}`)})
	if CodeOf(err) != CodeConfig || !contains(err.Error(), "beyond the double range") {
		t.Fatalf("err = %v, want a config error", err)
	}
	if _, err := HashArgs(json.RawMessage(`{"n":[1e400]}`)); err != nil {
		t.Fatalf("HashArgs refused what hashArgs hashes: %v", err)
	}
}

func TestDeriveKeyRefusesUnknownVersions(t *testing.T) {
	for _, tc := range []struct {
		version int
		genesis string
		want    string
	}{
		{2, "", "records exec idempotency key derivation 2 but its meta carries no genesis token"},
		{3, "G", "records exec idempotency key derivation 3; this engine derives versions 1 and 2 only"},
		{-1, "G", "derivation -1"},
	} {
		_, err := DeriveKey(tc.version, KeyInput{RunID: "run-x", Genesis: tc.genesis, Tool: "t"})
		if CodeOf(err) != CodeConfig || !contains(err.Error(), tc.want) || !contains(err.Error(), "run 'run-x'") {
			t.Errorf("version %d: err = %v, want a config error containing %q", tc.version, err, tc.want)
		}
	}
}

// The canonical text of the reference-computed vectors in
// conformance/testdata/argshash.json (which checks their digests).
func TestCanonicalMatchesTheReferenceText(t *testing.T) {
	b, err := os.ReadFile("../conformance/testdata/argshash.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Vectors []struct{ Name, Input, InputBase64, Canonical string }
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	for _, v := range doc.Vectors {
		in := []byte(v.Input)
		if v.InputBase64 != "" {
			in, _ = base64.StdEncoding.DecodeString(v.InputBase64)
		}
		got, err := canonical(in)
		if err != nil || string(got) != v.Canonical {
			t.Errorf("%s: canonical(%q) = %q, %v; want %q", v.Name, in, got, err, v.Canonical)
		}
	}
}

// BenchmarkHashArgs: the canonicalization every dispatch pays, for the
// conformance kit's e1 args and for a 1 MiB document.
func BenchmarkHashArgs(b *testing.B) {
	big := []byte(`{"rows":[`)
	for i := 0; len(big) < 1<<20; i++ {
		if i > 0 {
			big = append(big, ',')
		}
		big = append(big, `{"id":12345,"name":"café ☕ row","score":0.125,"tags":["a","b"],"ok":true}`...)
	}
	big = append(big, "]}"...)
	for _, c := range []struct {
		name string
		doc  []byte
	}{
		{"e1", []byte(`{"behavior":"echo","payload":{"hello":"world","n":7}}`)},
		{"1MiB", big},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(c.doc)))
			for b.Loop() {
				if _, err := HashArgs(c.doc); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
