package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/moat-sandbox/moat/executor"
	"github.com/moat-sandbox/moat/executor/subprocess"
	"github.com/moat-sandbox/moat/ledger"
)

// demoSnippet is the untrusted tool program of `moat demo`: it reads its
// request, looks for a host secret, writes into its workdir and answers.
const demoSnippet = `
import json, os, sys
req = json.load(sys.stdin)
open("scratch.txt", "w").write("written inside the workdir")
print(json.dumps({
    "answer": req["args"]["a"] * req["args"]["b"],
    "host_secret_seen": os.environ.get("MOAT_DEMO_SECRET"),
    "workdir_entries": sorted(os.listdir(".")),
    "env_names": sorted(os.environ),
}))
`

// demoCmd runs the main job on the embedded default: one real dispatch of an
// untrusted snippet, with the effect ledger rows it produced.
func demoCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("moat demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "usage: moat demo")
		return exitUsage
	}
	os.Setenv("MOAT_DEMO_SECRET", "sk-live-must-not-leak")
	mem := &ledger.Memory{}
	p, err := subprocess.New(subprocess.WithCommand("python3", "-c", demoSnippet), subprocess.WithAllowEnv("PATH"), subprocess.WithLedger(mem))
	if err != nil {
		fmt.Fprintf(stderr, "moat demo: %v\n", err)
		return exitSandbox
	}
	req := &executor.Request{Executor: "subprocess", Tool: "multiply", Args: json.RawMessage(`{"a":6,"b":7}`), RunID: "demo-run", SpanID: "demo-span"}
	req.IdempotencyKey, _ = executor.DeriveKey(1, executor.KeyInput{RunID: req.RunID, AgentSeq: 1, Ordinal: 1, Tool: req.Tool, Args: req.Args})
	fmt.Fprintf(stdout, "dispatching tool %q with args %s through the subprocess provider\n", req.Tool, req.Args)
	res, err := p.Dispatch(context.Background(), req)
	if err != nil {
		fmt.Fprintf(stderr, "moat demo: %s: %v\n", executor.CodeOf(err), err)
		return exitFailure
	}
	fmt.Fprintf(stdout, "result: %s\n\nledger rows:\n", res)
	for _, in := range mem.Intents() {
		printRow(stdout, "intent", in)
	}
	for _, r := range mem.Records() {
		printRow(stdout, "outcome", r)
	}
	return exitOK
}

func printRow(w io.Writer, phase string, row any) {
	b, _ := json.Marshal(row)
	fmt.Fprintf(w, "{\"phase\":%q,%s\n", phase, b[1:])
}
