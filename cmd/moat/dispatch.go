package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/moat-sandbox/moat/executor"
	"github.com/moat-sandbox/moat/executor/container"
	"github.com/moat-sandbox/moat/executor/native"
	"github.com/moat-sandbox/moat/executor/subprocess"
	"github.com/moat-sandbox/moat/ledger"
	"github.com/moat-sandbox/moat/policies"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// dispatchFlags are the flags of `moat dispatch`.
type dispatchFlags struct {
	tool, argsJSON, argsFile, runID, key, flavour, policy, ledgerPath string
	image, cli, runtime                                               string
	timeout                                                           time.Duration
	asJSON, expose                                                    bool
	logFormat                                                         string
	logger                                                            *slog.Logger
	limits                                                            *limitFlags
	pol                                                               *policies.Policy // native: the policy, once loaded
}

// dispatchCmd runs one full provider dispatch: the request goes through the
// protocol, the ledger and the chosen provider, and the JSON result (or the
// typed error) comes back.
func dispatchCmd(args []string, stdout, stderr io.Writer) int {
	var f dispatchFlags
	fs := flag.NewFlagSet("moat dispatch", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.tool, "tool", "", "the tool's contract name (required; any UTF-8 name without '/' or NUL, e.g. github.create_issue)")
	fs.StringVar(&f.argsJSON, "args", "", "the call's arguments as JSON (default null)")
	fs.StringVar(&f.argsFile, "args-file", "", "read the arguments from this JSON file instead")
	fs.StringVar(&f.runID, "run-id", "", "the run id recorded in the ledger (default a fresh one)")
	fs.StringVar(&f.key, "key", "", "the idempotency key (default derived from run id, tool and args)")
	fs.StringVar(&f.flavour, "executor", "native", "the provider: native, subprocess or container")
	fs.StringVar(&f.policy, "policy", "default", "native: the policy, a built-in name or a JSON file")
	fs.StringVar(&f.ledgerPath, "ledger", "", "append the intent and outcome rows to this JSONL effect ledger")
	fs.StringVar(&f.image, "image", "", "container: the image (pin it by digest: name@sha256:...)")
	fs.StringVar(&f.cli, "container-cli", "docker", "container: the docker-compatible CLI (docker or podman)")
	fs.StringVar(&f.runtime, "container-runtime", "", "container: the OCI runtime the CLI should use (e.g. runc)")
	fs.DurationVar(&f.timeout, "timeout", 0, "wall-clock limit of the tool (default: the policy's, or 30s)")
	fs.BoolVar(&f.asJSON, "json", false, "print the result or the error as one JSON object on stdout")
	fs.BoolVar(&f.expose, "expose-argv", false, "native: bind read-only exactly what CMD names, as moat run --expose-argv does (the tool's own script is not in the sandbox otherwise)")
	logFormat := logFormatFlag(fs)
	f.limits = addLimitFlags(fs)
	fs.Usage = func() {
		fmt.Fprint(stderr, `usage: moat dispatch --tool NAME [flags] -- CMD [ARG...]

Runs CMD as a tool program through a provider: it reads {"tool","args","idempotencyKey"}
on stdin and writes its JSON result on stdout. The result is printed on stdout; a
failure prints its typed error (code: message) on stderr.
Exit status: 0 ok, 1 tool error, 125 sandbox error (also: a limit named by --memory,
--pids, --cpus or the policy's limits.required that this host cannot enforce, unless
--allow-degraded), 64 usage.

Example:
  moat dispatch --tool multiply --args '{"a":6,"b":7}' --ledger effects.jsonl --expose-argv -- python3 "$PWD/tool.py"

Flags:
`)
		fs.PrintDefaults()
	}
	if status, done := parseFlags(fs, args); done {
		return status
	}
	usageErr := usageErrorf(stderr, "dispatch")
	argv := fs.Args()
	if *logFormat == "" && f.asJSON {
		*logFormat = logJSON
	}
	var err error
	if f.logger, err = cliLogger(*logFormat, "moat dispatch", stderr); err != nil {
		return usageErr("%v", err)
	}
	switch {
	case f.tool == "":
		return usageErr("--tool is required")
	case len(argv) == 0:
		return usageErr("missing the command to run after --")
	case f.argsJSON != "" && f.argsFile != "":
		return usageErr("give --args or --args-file, not both")
	}
	raw := json.RawMessage(f.argsJSON)
	if f.argsFile != "" {
		b, err := readCallerFile(f.argsFile)
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
	if f.runID == "" {
		f.runID = fmt.Sprintf("moat-%d-%d", os.Getpid(), time.Now().UnixMilli())
	}
	if f.key == "" {
		k, err := executor.DeriveKey(1, executor.KeyInput{RunID: f.runID, AgentSeq: 1, Ordinal: 1, Tool: f.tool, Args: raw})
		if err != nil {
			return usageErr("%v", err)
		}
		f.key = k
	}
	var led executor.Ledger
	if f.ledgerPath != "" {
		jl, err := ledger.Open(f.ledgerPath)
		if err != nil {
			fmt.Fprintf(stderr, "moat dispatch: %v\n", err)
			return exitSandbox
		}
		defer jl.Close()
		led = jl
	}
	p, tag, err := newProvider(&f, argv, led, stderr)
	if err != nil && f.pol != nil && refused("moat dispatch", err, f.pol, stderr) {
		// As moat run: a limit asked for and not enforceable runs nothing.
		if f.asJSON {
			b, _ := json.Marshal(map[string]any{"ok": false, "error": map[string]any{"code": executor.CodeOf(err), "message": err.Error()}})
			fmt.Fprintln(stdout, string(b))
		}
		return exitSandbox
	}
	if err != nil {
		fmt.Fprintf(stderr, "moat dispatch: %v\n", err)
		if executor.CodeOf(err) == executor.CodeConfig || errors.Is(err, errUsage) {
			return exitUsage
		}
		return exitSandbox
	}
	// The native provider gives back on Close what it took (its cgroup,
	// a delegated group it moved moat out of).
	if c, ok := p.(io.Closer); ok {
		defer func() {
			// A group not given back takes no process: say so.
			if err := c.Close(); err != nil {
				fmt.Fprintf(stderr, "moat dispatch: %v\n", err)
			}
		}()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	req := &executor.Request{Executor: tag, Tool: f.tool, Args: raw, RunID: f.runID, SpanID: "moat-cli", AgentType: "cli", IdempotencyKey: f.key}
	res, err := p.Dispatch(ctx, req)
	return report(res, err, f.asJSON, stdout, stderr)
}

var errUsage = errors.New("usage")

// newProvider builds the chosen provider, and the executor tag its rows
// carry (the native provider plugs in as 'subprocess', the contract's tag
// for out-of-process tools).
func newProvider(f *dispatchFlags, argv []string, led executor.Ledger, stderr io.Writer) (executor.Provider, string, error) {
	switch f.flavour {
	case "native":
		pol, err := policies.Load(f.policy)
		if err != nil {
			return nil, "", fmt.Errorf("%w: %v", errUsage, err)
		}
		if err := f.limits.check(f.timeout); err != nil {
			return nil, "", fmt.Errorf("%w: %v", errUsage, err)
		}
		f.limits.apply(pol)
		if err := pol.Validate(); err != nil {
			return nil, "", fmt.Errorf("%w: %v", errUsage, err)
		}
		f.pol = pol
		var exposed []specs.Mount
		if f.expose {
			// The tool gets the caller's PATH (WithAllowEnv below). A
			// command that does not exist is left to the provider, which
			// records the attempt and its spawn error as the contract has
			// it; any other refusal runs nothing.
			x, mounts, err := newExposer(pol.Rootfs, []string{"PATH=" + os.Getenv("PATH")}).exposeArgv(argv)
			var e *ExposeError
			switch {
			case errors.As(err, &e) && e.NotFound:
			case err != nil:
				return nil, "", fmt.Errorf("%w: %v", errUsage, err)
			default:
				argv, exposed = x, mounts
				for _, w := range exposedSocketWarnings(exposed) {
					fmt.Fprintln(stderr, w)
				}
			}
		} else if a := localFileArg(argv[1:]); a != "" {
			f.logger.Warn("an argument names a file of the current directory, which the sandbox does not have (its cwd is its own /work): give --expose-argv and the file's absolute path", "arg", a)
		}
		opts := append(sandboxOptions(), native.WithPolicy(pol), native.WithCommand(argv[0], argv[1:]...), native.WithBinds(exposed...), native.WithAllowEnv("PATH"), native.WithLogger(f.logger))
		if f.timeout != 0 {
			opts = append(opts, native.WithTimeout(f.timeout))
		}
		if led != nil {
			opts = append(opts, native.WithLedger(led))
		}
		p, err := native.New(opts...)
		return p, "subprocess", err
	}
	if f.limits.given() {
		return nil, "", fmt.Errorf("%w: --memory, --pids, --cpus and --allow-degraded apply to --executor native only", errUsage)
	}
	switch f.flavour {
	case "subprocess":
		opts := []subprocess.Option{subprocess.WithCommand(argv[0], argv[1:]...), subprocess.WithAllowEnv("PATH", "LANG"), subprocess.WithTimeout(f.timeout)}
		if led != nil {
			opts = append(opts, subprocess.WithLedger(led))
		}
		p, err := subprocess.New(opts...)
		return p, "subprocess", err
	case "container":
		if f.image == "" {
			return nil, "", fmt.Errorf("%w: --executor container needs --image", errUsage)
		}
		opts := []container.Option{container.WithImage(f.image), container.WithCLI(f.cli), container.WithCommand(argv[0], argv[1:]...), container.WithTimeout(f.timeout)}
		if f.runtime != "" {
			opts = append(opts, container.WithRuntime(f.runtime))
		}
		if led != nil {
			opts = append(opts, container.WithLedger(led))
		}
		p, err := container.New(opts...)
		return p, "container", err
	}
	return nil, "", fmt.Errorf("%w: --executor %q: use native, subprocess or container", errUsage, f.flavour)
}

// report prints a dispatch's result or error and returns the exit status:
// 0 ok, 125 when the sandbox (not the tool) failed, 1 for a tool failure.
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
	switch code {
	case executor.CodeSetup, executor.CodeSpawn, executor.CodeConfig, executor.CodeLedger:
		status = exitSandbox
	}
	if asJSON {
		b, _ := json.Marshal(map[string]any{"ok": false, "error": map[string]any{"code": code, "message": err.Error()}})
		fmt.Fprintln(stdout, string(b))
	} else {
		fmt.Fprintf(stderr, "moat dispatch: %s: %v\n", orNone(string(code)), err)
	}
	return status
}

// localFileArg returns the first of args that is a relative path of a
// regular file here: a tool's own script, named as on the caller's command
// line, which the sandbox cannot see unless exposed.
func localFileArg(args []string) string {
	for _, a := range args {
		if a == "" || filepath.IsAbs(a) {
			continue
		}
		if st, err := os.Stat(a); err == nil && st.Mode().IsRegular() {
			return a
		}
	}
	return ""
}
