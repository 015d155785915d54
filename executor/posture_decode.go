package executor

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"strings"
)

// UnmarshalJSON reads a descriptor as the reference's compileRegulatedProfile
// reads one (core engine/regulated-profile.ts, judgeDescriptor), so that
// RegulatedFloor gives a descriptor from elsewhere the reference's verdict:
// a member of another type is not a decode error but what the reference's
// checks make of it. regulatedPosture is 1 when it is the number 1 (1.0
// included); kind and name count when they are strings; ledger is
// ledger === true; allowEnv keeps its strings (none when it is not an
// array); bounds count only as an object whose timeoutMs and
// maxOutputBytes are numbers (fractions included), else they are missing;
// sandboxed and readOnlyRoot are === true and network is String(network).
// A document that is not an object decodes to the zero Posture, which the
// floor refuses as the reference does. Only JSON that does not parse is an
// error, and a native flavour's own members that do not decode.
func (p *Posture) UnmarshalJSON(b []byte) error {
	*p = Posture{}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return nil // an array, a scalar: not a descriptor
		}
		return err
	}
	if v, ok := jsonNumber(m["regulatedPosture"]); ok && v == math.Trunc(v) && math.Abs(v) < 1<<31 {
		p.RegulatedPosture = int(v)
	}
	switch raw := m["kind"]; {
	case raw == nil:
	case isJSONString(raw):
		_ = json.Unmarshal(raw, &p.Kind)
	default:
		p.kindText = jsToString(raw) // never equal to a kind: the reference compares with ===
	}
	if isJSONString(m["name"]) {
		_ = json.Unmarshal(m["name"], &p.Name)
	}
	p.Ledger = isJSONTrue(m["ledger"])
	p.AllowEnv = []string{}
	var env []json.RawMessage
	if json.Unmarshal(m["allowEnv"], &env) == nil {
		for _, e := range env {
			var s string
			if isJSONString(e) && json.Unmarshal(e, &s) == nil {
				p.AllowEnv = append(p.AllowEnv, s)
			}
		}
	}
	var bounds map[string]json.RawMessage
	if json.Unmarshal(m["bounds"], &bounds) == nil && bounds != nil {
		timeout, ok1 := jsonNumber(bounds["timeoutMs"])
		limit, ok2 := jsonNumber(bounds["maxOutputBytes"])
		if ok1 && ok2 {
			p.Bounds = &Bounds{TimeoutMs: timeout, MaxOutputBytes: limit}
		}
	}
	var iso map[string]json.RawMessage
	if json.Unmarshal(m["isolation"], &iso) == nil && iso != nil {
		i := &Isolation{
			Sandboxed:    isJSONTrue(iso["sandboxed"]),
			ReadOnlyRoot: isJSONTrue(iso["readOnlyRoot"]),
			Network:      "undefined", // String(undefined), as the reference attests a missing network
		}
		if isJSONString(iso["flavor"]) {
			_ = json.Unmarshal(iso["flavor"], &i.Flavor)
		}
		if raw := iso["network"]; raw != nil {
			i.Network = jsToString(raw)
		}
		var caps []json.RawMessage
		if json.Unmarshal(iso["capDrop"], &caps) == nil {
			i.CapDrop = []string{}
			for _, c := range caps {
				var s string
				if isJSONString(c) && json.Unmarshal(c, &s) == nil {
					i.CapDrop = append(i.CapDrop, s)
				}
			}
		}
		if isJSONString(iso["image"]) {
			_ = json.Unmarshal(iso["image"], &i.Image)
		}
		if i.Flavor == FlavorNative {
			i.Native = &NativeIsolation{}
			if err := json.Unmarshal(m["isolation"], i.Native); err != nil {
				return err
			}
		}
		p.Isolation = i
	}
	return nil
}

// jsonNumber returns raw as a number when it is a JSON number.
func jsonNumber(raw json.RawMessage) (float64, bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || !(raw[0] == '-' || '0' <= raw[0] && raw[0] <= '9') {
		return 0, false
	}
	var v float64
	if json.Unmarshal(raw, &v) != nil {
		return 0, false
	}
	return v, true
}

func isJSONTrue(raw json.RawMessage) bool { return string(bytes.TrimSpace(raw)) == "true" }

// jsToString is String(value) of a JSON value in JavaScript: a string as it
// is, a number as Number::toString writes it, an array its elements'
// strings joined by commas (null as ""), an object "[object Object]".
func jsToString(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "undefined"
	}
	switch raw[0] {
	case '"':
		var s string
		_ = json.Unmarshal(raw, &s)
		return s
	case '{':
		return "[object Object]"
	case '[':
		var elems []json.RawMessage
		_ = json.Unmarshal(raw, &elems)
		parts := make([]string, len(elems))
		for i, e := range elems {
			if s := string(bytes.TrimSpace(e)); s != "null" {
				parts[i] = jsToString(e)
			}
		}
		return strings.Join(parts, ",")
	}
	if v, ok := jsonNumber(raw); ok {
		return esNumber(v)
	}
	return string(raw) // true, false, null
}
