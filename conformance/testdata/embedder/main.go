// Command embedder is a program that embeds moat as a Go developer would,
// built as a static Go binary usually is: CGO_ENABLED=0, so without
// libseccomp. It runs a Python tool under a built-in policy and prints the
// result. conformance's TestEmbedderWithoutCgo builds it and its tests (the
// conformance kit over the same provider) and runs both as root and as
// nobody.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"

	"github.com/moat-sandbox/moat/executor"
	"github.com/moat-sandbox/moat/executor/native"
	"github.com/moat-sandbox/moat/nsexec"
	"github.com/moat-sandbox/moat/policies"
	"github.com/moat-sandbox/moat/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

const multiplyPy = `import json, sys
call = json.load(sys.stdin)
print(json.dumps({"product": call["args"]["a"] * call["args"]["b"]}))
`

func main() {
	nsexec.Init() // first: a sandbox is a re-exec of this binary
	policy := flag.String("policy", "python", "the built-in policy to run the tool under")
	flag.Parse()
	fmt.Printf("CGO_ENABLED=%s, libseccomp: %q\n", buildSetting("CGO_ENABLED"), seccomp.LibraryVersion())
	res, err := multiply(*policy)
	if err != nil {
		fmt.Fprintln(os.Stderr, "embedder:", err)
		os.Exit(1)
	}
	fmt.Println(string(res))
}

// multiply runs multiplyPy on 6 and 7 under the built-in policy name.
func multiply(name string) (json.RawMessage, error) {
	dir, err := os.MkdirTemp("", "embedder-tool-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	tool := filepath.Join(dir, "multiply.py")
	if err := os.Chmod(dir, 0o755); err != nil { // as root, the sandbox runs as another host id
		return nil, err
	}
	if err := os.WriteFile(tool, []byte(multiplyPy), 0o644); err != nil {
		return nil, err
	}
	pol, err := policies.Builtin(name)
	if err != nil {
		return nil, err
	}
	p, err := newProvider(pol, "python3", []string{tool}, dir)
	if err != nil {
		return nil, err
	}
	defer p.Close()
	return p.Dispatch(context.Background(), &executor.Request{
		Tool: "multiply", Args: json.RawMessage(`{"a":6,"b":7}`), RunID: "run", SpanID: "span", IdempotencyKey: "key"})
}

// newProvider is the provider of the program and of its tests: pol, the
// command, and dirs bound read-only at the same path.
func newProvider(pol *policies.Policy, command string, args []string, dirs ...string) (*native.Provider, error) {
	opts := []native.Option{native.WithPolicy(pol), native.WithCommand(command, args...)}
	for _, d := range dirs {
		opts = append(opts, native.WithBinds(specs.Mount{Source: d, Destination: d, Options: []string{"ro"}}))
	}
	return native.New(opts...)
}

func buildSetting(key string) string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, s := range info.Settings {
			if s.Key == key {
				return s.Value
			}
		}
	}
	return "unknown"
}
