package policies

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"unicode"
)

// maxPolicyBytes bounds what Parse reads; real policies are a few KiB.
const maxPolicyBytes = 4 << 20

// Parse decodes one policy document strictly and validates it (Validate):
//   - a field unknown at any depth, including a wrong letter case
//     ("Memory" for "memory"; encoding/json alone would accept it), is an error;
//   - a value of the wrong JSON type is an error naming its path;
//   - anything after the document but white space is an error;
//   - every problem is reported at once (errors.Join of *FieldError).
//
// The result is not resolved: Extends still names its base (see Resolve).
func Parse(r io.Reader) (*Policy, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxPolicyBytes+1))
	if err != nil {
		return nil, fmt.Errorf("parse policy: %w", err)
	}
	if len(data) > maxPolicyBytes {
		return nil, fmt.Errorf("parse policy: larger than %d bytes", maxPolicyBytes)
	}
	generic, errs, err := decodeGeneric(data)
	if err != nil {
		return nil, fmt.Errorf("parse policy: %w", err)
	}
	if _, ok := generic.(map[string]any); !ok {
		return nil, fmt.Errorf("parse policy: %w", &FieldError{Path: "(document)", Value: jsonValue(generic), Reason: "is not a JSON object"})
	}
	unknownFields(generic, reflect.TypeOf(Policy{}), "", &errs)
	var bad []string // paths dropped for the tolerant pass: repeated, unknown or of the wrong type
	for _, e := range errs {
		bad = append(bad, e.(*FieldError).Path)
	}
	kept := typeErrors(generic, reflect.TypeOf(Policy{}), "", &errs, &bad)
	p := new(Policy)
	if err := decodeOne(data, p, true); err != nil {
		if len(errs) == 0 {
			errs = append(errs, err) // what the walks cannot see
		}
	}
	if len(errs) > 0 {
		// The tolerant pass: validate what is left without the bad fields,
		// so a wrong value is reported beside an unknown field or a wrong
		// type, not after they are fixed. A problem that only follows from
		// a dropped field ("seccomp: is missing") is not repeated.
		if b, err := json.Marshal(kept); err == nil {
			var rest Policy
			if json.Unmarshal(b, &rest) == nil {
				for _, fe := range FieldErrors(rest.Validate()) {
					if !underAny(fe.Path, bad) {
						errs = append(errs, fe)
					}
				}
			}
		}
		return nil, fmt.Errorf("parse policy: %w", errors.Join(errs...))
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return p, nil
}

func decodeOne(data []byte, v any, strict bool) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if strict {
		dec.DisallowUnknownFields()
	}
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("trailing data after the policy document")
	}
	return nil
}

// unknownFields walks a generic decoding against the Go type t and reports
// every object key that names no field exactly (case included).
func unknownFields(v any, t reflect.Type, path string, errs *[]error) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Struct:
		obj, ok := v.(map[string]any)
		if !ok {
			return // a type error; the typed decoding reports it
		}
		fields := jsonFields(t)
		keys := make([]string, 0, len(obj))
		for k := range obj {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			ft, ok := fields[k]
			if !ok {
				*errs = append(*errs, &FieldError{Path: join(path, k), Reason: "is not a known field" + suggest(k, fields)})
				continue
			}
			unknownFields(obj[k], ft, join(path, k), errs)
		}
	case reflect.Slice, reflect.Array:
		arr, ok := v.([]any)
		if !ok {
			return
		}
		for i, e := range arr {
			unknownFields(e, t.Elem(), fmt.Sprintf("%s[%d]", path, i), errs)
		}
	}
}

// typeErrors walks a generic decoding against the Go type t, reports every
// value of the wrong JSON type (as encoding/json would refuse it) with its
// path, and returns the decoding without those values and without unknown
// keys.
func typeErrors(v any, t reflect.Type, path string, errs *[]error, bad *[]string) any {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if v == nil {
		return nil // null leaves any field unset
	}
	wrong := func() any {
		*errs = append(*errs, &FieldError{Path: path, Value: jsonValue(v), Reason: "has the wrong type; want " + jsonType(t)})
		*bad = append(*bad, path)
		return nil
	}
	if reflect.PointerTo(t).Implements(unmarshalerType) {
		return leaf(v, t, wrong)
	}
	switch t.Kind() {
	case reflect.Struct:
		obj, ok := v.(map[string]any)
		if !ok {
			return wrong()
		}
		fields := jsonFields(t)
		out := map[string]any{}
		for _, k := range sortedKeys(obj) {
			if ft, ok := fields[k]; ok {
				if kv := typeErrors(obj[k], ft, join(path, k), errs, bad); kv != nil {
					out[k] = kv
				}
			}
		}
		return out
	case reflect.Map:
		obj, ok := v.(map[string]any)
		if !ok {
			return wrong()
		}
		out := map[string]any{}
		for _, k := range sortedKeys(obj) {
			if kv := typeErrors(obj[k], t.Elem(), join(path, k), errs, bad); kv != nil {
				out[k] = kv
			}
		}
		return out
	case reflect.Slice, reflect.Array:
		arr, ok := v.([]any)
		if !ok {
			return wrong()
		}
		out := make([]any, 0, len(arr))
		for i, e := range arr {
			if ev := typeErrors(e, t.Elem(), fmt.Sprintf("%s[%d]", path, i), errs, bad); ev != nil {
				out = append(out, ev)
			}
		}
		return out
	case reflect.Interface:
		return v
	}
	return leaf(v, t, wrong)
}

// leaf decodes one scalar as encoding/json would into t. A JSON string into
// a plain string kind always decodes, and is most of a policy's leaves (the
// seccomp allowlist's names): it skips the encode and decode round trip.
func leaf(v any, t reflect.Type, wrong func() any) any {
	if _, ok := v.(string); ok && t.Kind() == reflect.String && !reflect.PointerTo(t).Implements(unmarshalerType) {
		return v
	}
	b, err := json.Marshal(v)
	if err != nil {
		return wrong()
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(reflect.New(t).Interface()); err != nil {
		return wrong()
	}
	return v
}

var unmarshalerType = reflect.TypeFor[json.Unmarshaler]()

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// underAny reports whether path is one of paths or lies inside one.
func underAny(path string, paths []string) bool {
	for _, b := range paths {
		if path == b || strings.HasPrefix(path, b+".") || strings.HasPrefix(path, b+"[") {
			return true
		}
	}
	return false
}

func jsonFields(t reflect.Type) map[string]reflect.Type {
	m := make(map[string]reflect.Type, t.NumField())
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		m[name] = f.Type
	}
	return m
}

func suggest(k string, fields map[string]reflect.Type) string {
	names := make([]string, 0, len(fields))
	for name := range fields {
		if strings.EqualFold(name, k) {
			return fmt.Sprintf(" (did you mean %q?)", name)
		}
		names = append(names, name)
	}
	sort.Strings(names)
	return "; known fields: " + strings.Join(names, ", ")
}

// join appends an object key to a JSON path. A key a path could not show
// plainly (empty, or with a '.', a bracket, a quote, a space or a control
// character) is written quoted in brackets: `[""]`, `limits["a.b"]`.
func join(path, key string) string {
	if key == "" || strings.ContainsFunc(key, func(r rune) bool {
		return r <= ' ' || r == '.' || r == '[' || r == ']' || r == '"' || r == '\\' || r == 0x7f || !unicode.IsPrint(r)
	}) {
		return path + "[" + strconv.Quote(key) + "]"
	}
	if path == "" {
		return key
	}
	return path + "." + key
}

func jsonType(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer in range for " + t.Kind().String()
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Struct, reflect.Map, reflect.Pointer:
		return "an object"
	}
	return t.String()
}
