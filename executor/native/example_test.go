package native_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/moat-sandbox/moat/executor"
	"github.com/moat-sandbox/moat/executor/native"
	"github.com/moat-sandbox/moat/ledger"
	"github.com/moat-sandbox/moat/nsexec"
	"github.com/moat-sandbox/moat/policies"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// multiplyPy is a tool program: it reads {"tool","args","idempotencyKey"}
// on stdin and writes its JSON result on stdout.
const multiplyPy = `import json, sys
call = json.load(sys.stdin)
print(json.dumps({"product": call["args"]["a"] * call["args"]["b"]}))
`

// A tool run in the sandbox with a JSONL ledger. The sandbox sees the
// host's system directories (python3 is there) but no other host file:
// the tool's own file is bound in, read-only at the same path, or python3
// answers "can't open file". nsexec.Init is the first call of main (in a
// test binary, of TestMain: conformance.Main makes it here).
func ExampleNew() {
	nsexec.Init() // first: a sandbox is a re-exec of this binary, and in it Init never returns

	dir, tool := writeTool("multiply.py", multiplyPy) // dir/tool/multiply.py
	defer os.RemoveAll(dir)
	pol, err := policies.Builtin("python") // or policies.Load("my-policy.json")
	if err != nil {
		log.Fatal(err)
	}
	jsonl, err := ledger.Open(filepath.Join(dir, "effects.jsonl")) // outside what is bound
	if err != nil {
		log.Fatal(err)
	}
	defer jsonl.Close()
	p, err := native.New(
		native.WithPolicy(pol),
		native.WithCommand("python3", tool),
		native.WithBinds(specs.Mount{Source: filepath.Dir(tool), Destination: filepath.Dir(tool), Options: []string{"ro"}}),
		native.WithLedger(jsonl),
	)
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()

	args := json.RawMessage(`{"a":6,"b":7}`)
	key, err := executor.DeriveKey(executor.CurrentKeyDerivation, executor.KeyInput{
		RunID: "run-1", Genesis: "01JDQ2B3C4D5E6F7G8H9J0K1M2", AgentSeq: 1, Ordinal: 1, Tool: "multiply", Args: args})
	if err != nil {
		log.Fatal(err)
	}
	res, err := p.Dispatch(context.Background(), &executor.Request{
		Tool: "multiply", Args: args, RunID: "run-1", SpanID: "span-1", IdempotencyKey: key})
	if err != nil {
		var e *executor.Error
		if errors.As(err, &e) { // e.Code: config timeout aborted output-cap exit protocol spawn ledger oom setup
			log.Fatalf("%s: %v", e.Code, e)
		}
		log.Fatal(err)
	}
	fmt.Println(string(res))

	scan, err := ledger.Scan(jsonl.Path())
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("ledger: %d intent, %d outcome (%s), %d orphans\n", len(scan.Intents), len(scan.Outcomes), scan.Outcomes[0].Outcome, len(scan.Orphans))
	// Output:
	// {"product": 42}
	// ledger: 1 intent, 1 outcome (ok), 0 orphans
}

// writeTool writes a tool program into dir/tool, a directory the sandbox's
// id can read (as root, a sandbox runs as an unprivileged host id), in a
// fresh 0700 dir for what the sandbox must not see.
func writeTool(name, text string) (dir, path string) {
	dir, err := os.MkdirTemp("", "moat-example-")
	if err == nil {
		err = os.Mkdir(filepath.Join(dir, "tool"), 0o755)
	}
	path = filepath.Join(dir, "tool", name)
	if err == nil {
		err = os.WriteFile(path, []byte(text), 0o644)
	}
	if err != nil {
		log.Fatal(err)
	}
	return dir, path
}
