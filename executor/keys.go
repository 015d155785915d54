package executor

import (
	"encoding/json"
	"fmt"
	"math"
)

// CurrentKeyDerivation is the derivation version a fresh run stamps
// (CURRENT_EXEC_KEY_DERIVATION).
const CurrentKeyDerivation = 2

// KeyInput identifies one tool call within a run (contract 3.1).
type KeyInput struct {
	RunID string
	// Genesis is the run's 26-character ULID minted at its fresh start; used
	// by version 2 only.
	Genesis string
	// AgentSeq is the journal seq of the containing agent invocation.
	AgentSeq int64
	// Ordinal is the 1-based position of the call in that invocation's loop.
	Ordinal int64
	Tool    string
	Args    json.RawMessage
}

// DeriveKey derives the idempotency key of a call under the given
// derivation version (contract 3.2): hex sha256 of the RFC 8785 text of
//
//	v1: {runId, agentSeq, ordinal, tool, args}
//	v2: {derivation: 2, runId, genesis, agentSeq, ordinal, tool, args}
//
// Version 0 means "absent" and derives version 1, as a resumed run recorded
// before the field existed does. Any other version, or version 2 without a
// genesis, is refused with a config error: deriving a different key would
// break the run's external effect deduplication (contract 3.3).
func DeriveKey(version int, in KeyInput) (string, error) {
	args := in.Args
	if len(args) == 0 {
		args = json.RawMessage("null")
	}
	// The args as the reference's JSON.parse reads them (HashArgs); its
	// core JCS, unlike hashArgs, throws on a number beyond the double range.
	v, err := parseJS(args)
	if err != nil {
		return "", newError(CodeConfig, err, "derive idempotency key: args of tool '%s' are not valid JSON: %v", in.Tool, err)
	}
	if !finite(v) {
		return "", newError(CodeConfig, nil, "derive idempotency key: args of tool '%s' hold a number beyond the double range, which JavaScript reads as Infinity and the reference's key derivation refuses (JCS: non-finite numbers are not JSON); send it as a string", in.Tool)
	}
	args = appendStable(nil, v)
	var doc any
	switch version {
	case 0, 1:
		doc = struct {
			AgentSeq int64           `json:"agentSeq"`
			Args     json.RawMessage `json:"args"`
			Ordinal  int64           `json:"ordinal"`
			RunID    string          `json:"runId"`
			Tool     string          `json:"tool"`
		}{in.AgentSeq, args, in.Ordinal, in.RunID, in.Tool}
	case 2:
		if in.Genesis == "" {
			return "", newError(CodeConfig, nil, "resume: run '%s' records exec idempotency key derivation 2 but its meta carries no genesis token; the journal store violated the RunMeta round-trip contract (https://docs.rulvar.com/guide/store-authors)", in.RunID)
		}
		doc = struct {
			AgentSeq   int64           `json:"agentSeq"`
			Args       json.RawMessage `json:"args"`
			Derivation int             `json:"derivation"`
			Genesis    string          `json:"genesis"`
			Ordinal    int64           `json:"ordinal"`
			RunID      string          `json:"runId"`
			Tool       string          `json:"tool"`
		}{in.AgentSeq, args, 2, in.Genesis, in.Ordinal, in.RunID, in.Tool}
	default:
		return "", newError(CodeConfig, nil, "resume: run '%s' records exec idempotency key derivation %d; this engine derives versions 1 and 2 only, so resuming it here would break the run's external effect deduplication; resume with a rulvar release that supports the recorded derivation", in.RunID, version)
	}
	raw, err := json.Marshal(doc)
	if err != nil {
		return "", fmt.Errorf("derive idempotency key: %w", err)
	}
	canon, err := canonical(raw)
	if err != nil {
		return "", fmt.Errorf("derive idempotency key: %w", err)
	}
	return sha256Hex(canon), nil
}

// finite reports whether every number in v is finite.
func finite(v *jsValue) bool {
	switch v.kind {
	case jsNumber:
		return !math.IsInf(v.num, 0) && !math.IsNaN(v.num)
	case jsArray:
		for _, el := range v.elems {
			if !finite(el) {
				return false
			}
		}
	case jsObject:
		for _, m := range v.members {
			if !finite(m) {
				return false
			}
		}
	}
	return true
}
