package policies

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

//go:embed builtin/*.json
var builtinFS embed.FS

// Builtins returns the names of the built-in policies, sorted.
func Builtins() []string {
	entries, err := fs.ReadDir(builtinFS, "builtin")
	if err != nil {
		return nil
	}
	var names []string
	for _, e := range entries {
		if name, ok := strings.CutSuffix(e.Name(), ".json"); ok {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

// Builtin returns the resolved built-in policy name. Each call returns a
// fresh copy that the caller may modify.
func Builtin(name string) (*Policy, error) {
	p, err := parseBuiltin(name)
	if err != nil {
		return nil, err
	}
	return resolve(p, name, "", nil)
}

// Load returns the resolved policy named by nameOrPath: a built-in name
// (see Builtins), or else a policy file, whose relative extends paths are
// taken relative to the file's directory. A name that is neither is a
// *NotFoundError listing the built-ins.
func Load(nameOrPath string) (*Policy, error) {
	if isBuiltinName(nameOrPath) {
		return Builtin(nameOrPath)
	}
	abs, err := filepath.Abs(nameOrPath)
	if err != nil {
		return nil, fmt.Errorf("load policy %q: %w", nameOrPath, err)
	}
	p, real, err := parseFile(abs)
	var nf *NotFoundError
	if errors.As(err, &nf) {
		nf.Name = nameOrPath
		return nil, nf
	}
	if err != nil {
		return nil, fmt.Errorf("load policy: %w", err)
	}
	out, err := resolve(p, real, filepath.Dir(real), nil)
	if err != nil {
		return nil, fmt.Errorf("load policy: %w", err)
	}
	return out, nil
}

func isBuiltinName(name string) bool {
	return !strings.ContainsRune(name, '/') && slices.Contains(Builtins(), name)
}

func parseBuiltin(name string) (*Policy, error) {
	if !isBuiltinName(name) {
		return nil, &NotFoundError{Name: name, Builtins: Builtins(), Err: fs.ErrNotExist}
	}
	b, err := builtinFS.ReadFile(path.Join("builtin", name+".json"))
	if err != nil {
		return nil, fmt.Errorf("built-in policy %q: %w", name, err)
	}
	// The embedded documents are ours and tested to pass Parse
	// (TestBuiltinsTakeTheFastPath): one strict typed decoding is enough.
	// Parse's second, generic decoding only makes the error messages of a
	// user's file better, and costs twice the time of a cold start's
	// policy load.
	p := new(Policy)
	if err := decodeOne(b, p, true); err == nil && p.Validate() == nil {
		return p, nil
	}
	p, err = Parse(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("built-in policy %q: %w", name, err)
	}
	return p, nil
}
