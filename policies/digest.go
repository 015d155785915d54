package policies

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
)

// MarshalIndent returns the policy as indented JSON, as `moat policy show`
// prints it. Parse reads it back to an equal policy.
func (p *Policy) MarshalIndent() ([]byte, error) {
	b, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("marshal policy %q: %w", p.Name, err)
	}
	return append(b, '\n'), nil
}

// Digest returns "sha256:<hex>" over the canonical JSON of the whole policy
// (call it on a resolved policy to identify what actually runs). Canonical
// JSON here is encoding/json of the typed struct: fixed field order, no maps,
// so equal policies give equal bytes. RFC 8785 (JCS) is not used because it
// writes numbers as doubles, which would round 64-bit seccomp argument values
// and let two different policies share a digest.
func (p *Policy) Digest() (string, error) {
	return digest(p)
}

// SeccompDigest returns the digest of the seccomp profile alone ("" when
// there is none). It equals seccomp.Digest of the same profile, which keys
// the compile cache: policies that differ only outside seccomp share one
// compiled filter.
func (p *Policy) SeccompDigest() (string, error) {
	if p.Seccomp == nil {
		return "", nil
	}
	return digest(p.Seccomp)
}

func digest(v any) (string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("digest policy: %w", err)
	}
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}
