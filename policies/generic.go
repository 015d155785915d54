package policies

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// maxDepth bounds the nesting of a policy document, as encoding/json bounds
// its own decoding (10000); a policy nests five deep.
const maxDepth = 10000

// decodeGeneric decodes one JSON document into maps, slices, strings,
// json.Number, bools and nils, as decoding into an `any` would, and
// returns a *FieldError for every key that appears twice in one object.
// encoding/json keeps the last of two equal keys without a word, so
// `"network": "loopback", ..., "network": "none"` would run with what a
// reader of the top of the file does not see (a JSON parser differential,
// as in CVE-2017-12635); moat refuses such a document.
func decodeGeneric(data []byte) (v any, dups []error, err error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	g := genericDecoder{dec: dec}
	v, err = g.value("", 0)
	if err != nil {
		return nil, nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, nil, errors.New("trailing data after the policy document")
	}
	return v, g.dups, nil
}

type genericDecoder struct {
	dec  *json.Decoder
	dups []error
}

func (g *genericDecoder) value(path string, depth int) (any, error) {
	if depth > maxDepth {
		return nil, fmt.Errorf("nested deeper than %d", maxDepth)
	}
	tok, err := g.dec.Token()
	if err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	switch tok {
	case json.Delim('{'):
		obj := map[string]any{}
		for g.dec.More() {
			kt, err := g.dec.Token()
			if err != nil {
				return nil, err
			}
			k := kt.(string) // inside an object, Token returns keys as strings
			at := join(path, k)
			v, err := g.value(at, depth+1)
			if err != nil {
				return nil, err
			}
			if _, seen := obj[k]; seen {
				g.dups = append(g.dups, &FieldError{Path: at, Reason: "appears more than once in one object; keep one"})
			}
			obj[k] = v
		}
		_, err := g.dec.Token() // '}'
		return obj, err
	case json.Delim('['):
		arr := []any{}
		for g.dec.More() {
			v, err := g.value(fmt.Sprintf("%s[%d]", path, len(arr)), depth+1)
			if err != nil {
				return nil, err
			}
			arr = append(arr, v)
		}
		_, err := g.dec.Token() // ']'
		return arr, err
	}
	return tok, nil
}
