package executor

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
)

// HashArgs is the reference's hashArgs (contract section 4): the lowercase
// hex sha256 of the canonical JSON text of args. args are read as the
// reference's JSON.parse reads them (a duplicated member is last-wins, a
// lone surrogate escape is kept, ill-formed UTF-8 is U+FFFD), and written
// in the reference's canonical form (members sorted by UTF-16 code units,
// ES number formatting, -0 as 0, a number beyond the double range as
// null). Empty args hash as null. Only text JSON.parse refuses is refused
// (and nesting deeper than the reference's stack allows).
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

// canonical returns the reference's canonical text of a JSON document
// (for any document, byte-identical to core's RFC 8785 serializer of the
// value JSON.parse makes of it).
func canonical(doc []byte) ([]byte, error) {
	v, err := parseJS(doc)
	if err != nil {
		return nil, fmt.Errorf("canonicalize JSON: %w", err)
	}
	return appendStable(make([]byte, 0, len(doc)), v), nil
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
