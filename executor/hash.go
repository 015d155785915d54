package executor

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/gowebpki/jcs"
)

// HashArgs is the reference's hashArgs (contract section 4): the lowercase
// hex sha256 of the canonical JSON text of args. For any value that came
// from JSON, the reference's own canonicalization is byte-identical to RFC
// 8785 (members sorted by UTF-16 code units, ES number formatting, -0 as 0),
// so this uses an RFC 8785 implementation. Empty args hash as null.
func HashArgs(args json.RawMessage) (string, error) {
	if len(args) == 0 {
		args = json.RawMessage("null")
	}
	canon, err := canonical(args)
	if err != nil {
		return "", fmt.Errorf("hash args: %w", err)
	}
	return sha256Hex(canon), nil
}

// canonical returns the RFC 8785 text of a JSON document.
func canonical(doc []byte) ([]byte, error) {
	out, err := jcs.Transform(doc)
	if err != nil {
		return nil, fmt.Errorf("canonicalize JSON: %w", err)
	}
	return out, nil
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
