package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/moat-sandbox/moat/executor"
	"github.com/moat-sandbox/moat/executor/subprocess"
)

// dispatchCmd runs one full provider dispatch: the request goes through the
// protocol, the ledger and the chosen provider, and the JSON result (or the
// typed error) comes back.
func dispatchCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("moat dispatch", flag.ContinueOnError)
	fs.SetOutput(stderr)
	tool := fs.String("tool", "", "the tool's contract name (required; ^[a-zA-Z0-9_-]{1,64}$)")
	argsJSON := fs.String("args", "", "the call's arguments as JSON (default null)")
	argsFile := fs.String("args-file", "", "read the arguments from this JSON file instead")
	runID := fs.String("run-id", "", "the run id recorded in the ledger (default a fresh one)")
	key := fs.String("key", "", "the idempotency key (default derived from run id, tool and args)")
	flavour := fs.String("executor", "subprocess", "the provider: subprocess")
	timeout := fs.Duration("timeout", executor.DefaultTimeout, "wall-clock limit of the tool")
	asJSON := fs.Bool("json", false, "print the result or the error as one JSON object")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: moat dispatch --tool NAME [--args JSON | --args-file F] [--run-id ID] [--json] -- CMD [ARG...]\n\nRuns CMD as a tool program: it reads {\"tool\",\"args\",\"idempotencyKey\"} on stdin and writes its JSON result on stdout.\nExit status: 0 ok, 1 tool error, 125 sandbox error, 64 usage.\n\nFlags:")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	argv := fs.Args()
	usageErr := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "moat dispatch: "+format+"\n", a...)
		return exitUsage
	}
	switch {
	case *tool == "":
		return usageErr("--tool is required")
	case len(argv) == 0:
		return usageErr("missing the command to run after --")
	case *argsJSON != "" && *argsFile != "":
		return usageErr("give --args or --args-file, not both")
	case *flavour != "subprocess":
		return usageErr("--executor %q is not available in this build; use subprocess", *flavour)
	}
	raw := json.RawMessage(*argsJSON)
	if *argsFile != "" {
		b, err := os.ReadFile(*argsFile)
		if err != nil {
			return usageErr("read --args-file: %v", err)
		}
		raw = b
	}
	if len(raw) == 0 {
		raw = json.RawMessage("null")
	}
	if !json.Valid(raw) {
		return usageErr("--args is not valid JSON")
	}
	if *runID == "" {
		*runID = fmt.Sprintf("moat-%d-%d", os.Getpid(), time.Now().UnixMilli())
	}
	if *key == "" {
		k, err := executor.DeriveKey(1, executor.KeyInput{RunID: *runID, AgentSeq: 1, Ordinal: 1, Tool: *tool, Args: raw})
		if err != nil {
			return usageErr("%v", err)
		}
		*key = k
	}
	p, err := subprocess.New(subprocess.WithCommand(argv[0], argv[1:]...), subprocess.WithTimeout(*timeout),
		subprocess.WithAllowEnv("PATH", "LANG"))
	if err != nil {
		return usageErr("%v", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	req := &executor.Request{Executor: "subprocess", Tool: *tool, Args: raw, RunID: *runID, SpanID: "moat-cli", IdempotencyKey: *key}
	res, err := p.Dispatch(ctx, req)
	return report(res, err, *asJSON, stdout, stderr)
}

// report prints a dispatch's result or error and returns the exit status.
func report(res json.RawMessage, err error, asJSON bool, stdout, stderr io.Writer) int {
	if err == nil {
		if asJSON {
			b, _ := json.Marshal(map[string]any{"ok": true, "result": res})
			fmt.Fprintln(stdout, string(b))
		} else {
			fmt.Fprintln(stdout, string(res))
		}
		return exitOK
	}
	code := executor.CodeOf(err)
	status := exitFailure
	if code == executor.CodeSetup || code == executor.CodeSpawn || code == executor.CodeConfig {
		status = exitSandbox
	}
	if asJSON {
		b, _ := json.Marshal(map[string]any{"ok": false, "error": map[string]any{"code": code, "message": err.Error()}})
		fmt.Fprintln(stdout, string(b))
	} else {
		fmt.Fprintf(stderr, "moat dispatch: %s: %v\n", code, err)
	}
	return status
}
