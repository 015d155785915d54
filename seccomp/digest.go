package seccomp

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// Digest returns "sha256:<hex>" over the canonical JSON of profile: the
// encoding/json form of the typed struct, whose field order is fixed and which
// holds no maps, so equal profiles give equal bytes. RFC 8785 (JCS) is not
// used on purpose: it writes numbers as IEEE doubles, and seccomp argument
// values are 64-bit integers (0xffffffff00005412) that a double would round,
// so two different profiles could share a digest and a cache entry.
//
// policies.Policy.SeccompDigest computes the same value.
func Digest(profile *specs.LinuxSeccomp) (string, error) {
	b, err := json.Marshal(profile)
	if err != nil {
		return "", fmt.Errorf("digest seccomp profile: %w", err)
	}
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}
