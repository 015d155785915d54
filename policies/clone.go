package policies

import (
	"encoding/json"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

type (
	mount  = specs.Mount
	rlimit = specs.POSIXRlimit
)

// clone returns a deep copy of p. A JSON round trip is exact for this type
// (strings, integers, one float64 written in shortest form) and keeps the
// copy in step with every field added later.
func clone(p *Policy) *Policy {
	b, err := json.Marshal(p)
	if err != nil {
		panic("policies: marshal policy: " + err.Error()) // cannot happen: no maps, channels or funcs
	}
	out := new(Policy)
	if err := json.Unmarshal(b, out); err != nil {
		panic("policies: unmarshal policy: " + err.Error())
	}
	return out
}
