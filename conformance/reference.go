package conformance

import (
	"bytes"
	_ "embed"
	"encoding/json"
)

// testdata/reference-posture.json holds what the reference itself produced
// (its source member says how): never values moat computed.
//
//go:embed testdata/reference-posture.json
var referencePostureJSON []byte

// ReferencePosture is a regulated posture descriptor a reference executor
// attested, with the fingerprint the reference's own JCS gives it
// (sha256 hex). A provider that claims a reference flavour attests the same
// JSON under the same settings.
type ReferencePosture struct {
	// Name says which executor and settings ("container defaults").
	Name string
	// Descriptor is the descriptor's compact JSON.
	Descriptor  string
	Fingerprint string
}

// ReferenceVerdict is how the reference's compileRegulatedProfile judged
// one descriptor: Verdict "accepted" or "refused", and for a refusal the
// field and the requirement of its message.
type ReferenceVerdict struct {
	Name        string
	Descriptor  json.RawMessage
	Verdict     string
	Field       string
	Requirement string
}

// ReferencePostures returns the descriptors of testdata/reference-posture.json.
func ReferencePostures() []ReferencePosture {
	var out []ReferencePosture
	for _, p := range loadReference().Postures {
		var c bytes.Buffer
		_ = json.Compact(&c, p.Descriptor) // valid: checked by TestReferenceData
		out = append(out, ReferencePosture{Name: p.Name, Descriptor: c.String(), Fingerprint: p.Fingerprint})
	}
	return out
}

// ReferenceFloor returns the reference's verdicts of
// testdata/reference-posture.json.
func ReferenceFloor() []ReferenceVerdict {
	var out []ReferenceVerdict
	for _, f := range loadReference().Floor {
		out = append(out, ReferenceVerdict{Name: f.Name, Descriptor: f.Descriptor, Verdict: f.Reference.Verdict,
			Field: f.Reference.Field, Requirement: f.Reference.Requirement})
	}
	return out
}

type referenceData struct {
	Postures []struct {
		Name        string          `json:"name"`
		Descriptor  json.RawMessage `json:"descriptor"`
		Fingerprint string          `json:"fingerprint"`
	} `json:"postures"`
	Floor []struct {
		Name       string          `json:"name"`
		Descriptor json.RawMessage `json:"descriptor"`
		Reference  struct {
			Verdict     string `json:"verdict"`
			Field       string `json:"field"`
			Requirement string `json:"requirement"`
		} `json:"reference"`
	} `json:"floor"`
}

// loadReference decodes the embedded file; a defect in it leaves both
// lists empty, which TestReferenceData reports.
func loadReference() referenceData {
	var d referenceData
	if err := json.Unmarshal(referencePostureJSON, &d); err != nil {
		return referenceData{}
	}
	return d
}
