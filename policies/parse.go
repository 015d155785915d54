package policies

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"sort"
	"strings"
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
	var generic any
	if err := decodeOne(data, &generic, false); err != nil {
		return nil, fmt.Errorf("parse policy: %w", err)
	}
	if _, ok := generic.(map[string]any); !ok {
		return nil, fmt.Errorf("parse policy: %w", &FieldError{Path: "(document)", Value: jsonValue(generic), Reason: "is not a JSON object"})
	}
	var errs []error
	unknownFields(generic, reflect.TypeOf(Policy{}), "", &errs)
	p := new(Policy)
	if err := decodeOne(data, p, true); err != nil {
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &te):
			errs = append(errs, &FieldError{Path: te.Field, Value: te.Value, Reason: "has the wrong type; want " + jsonType(te.Type)})
		case len(errs) == 0:
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
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

func join(path, key string) string {
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
