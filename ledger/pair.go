package ledger

import "math"

// legacyKey is the join key of a row without attemptId: the reference
// builds it as JSON.stringify([idempotencyKey, startedAt]), so -0 and 0
// join, and every non-finite number (only reachable through a foreign row
// holding, say, 1e400) stringifies to null.
type legacyKey struct {
	key     string
	at      float64
	nonReal bool
}

func legacyKeyOf(in *Intent) legacyKey {
	at := float64(in.StartedAt)
	if math.IsInf(at, 0) || math.IsNaN(at) {
		return legacyKey{key: in.IdempotencyKey, nonReal: true}
	}
	return legacyKey{key: in.IdempotencyKey, at: at + 0} // +0 turns -0 into 0
}

// orphans pairs outcomes with intents exactly (contract 8.6), independent
// of line order: an outcome with an attemptId resolves the intents with
// the same attemptId; one without resolves the intents without, that
// share (idempotencyKey, startedAt). The two classes never cross, and an
// outcome of any class resolves only its own attempt.
func orphans(intents []ScannedIntent, outcomes []ScannedRecord) []ScannedIntent {
	attempts := make(map[string]struct{}, len(outcomes))
	var legacy map[legacyKey]struct{}
	for i := range outcomes {
		o := &outcomes[i]
		if o.HasAttemptID {
			attempts[o.AttemptID] = struct{}{}
			continue
		}
		if legacy == nil {
			legacy = make(map[legacyKey]struct{})
		}
		legacy[legacyKeyOf(&o.Intent)] = struct{}{}
	}
	var out []ScannedIntent
	for i := range intents {
		in := &intents[i]
		var resolved bool
		if in.HasAttemptID {
			_, resolved = attempts[in.AttemptID]
		} else {
			_, resolved = legacy[legacyKeyOf(&in.Intent)]
		}
		if !resolved {
			out = append(out, *in)
		}
	}
	return out
}

// Merge combines the scans of several files, one per writer process
// (effects.<worker>.jsonl, as the writer contract recommends), into one
// result in argument order, and pairs intents and outcomes across all of
// them: an outcome in one file resolves its intent in another.
func Merge(scans ...*ScanResult) *ScanResult {
	m := &ScanResult{}
	for _, s := range scans {
		if s == nil {
			continue
		}
		m.Files = append(m.Files, s.Files...)
		m.Intents = append(m.Intents, s.Intents...)
		m.Outcomes = append(m.Outcomes, s.Outcomes...)
		m.Corrupt = append(m.Corrupt, s.Corrupt...)
		m.Torn = append(m.Torn, s.Torn...)
		m.TornTails = append(m.TornTails, s.TornTails...)
	}
	m.Orphans = orphans(m.Intents, m.Outcomes)
	return m
}
