package executor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/moat-sandbox/moat/executor/internal/workdir"
	"github.com/moat-sandbox/moat/ledger"
	"golang.org/x/sys/unix"
)

// The reference's defaults (contract 5.1).
const (
	DefaultTimeout        = 30 * time.Second
	DefaultKillGrace      = 2 * time.Second
	DefaultMaxOutputBytes = 1 << 20
	// DefaultDrainTimeout bounds the wait for the output pipes after the
	// child and its process tree are gone: a process that escaped the tree
	// (setsid and a new group) and still holds a pipe must not keep the
	// dispatch pending (contract 5.5, PORT NOTE).
	DefaultDrainTimeout = 500 * time.Millisecond
)

// Ledger is the effect ledger's seam (contract 8.2): Record is called once
// per dispatch that got past the intent step, success or failure.
type Ledger interface {
	Record(ctx context.Context, r ledger.Record) error
}

// IntentLedger is a two-phase ledger: Intent is awaited strictly before
// anything is spawned, and its failure refuses the dispatch.
type IntentLedger interface {
	Ledger
	Intent(ctx context.Context, i ledger.Intent) error
}

// SandboxFunc returns a launcher argv prefix for one dispatch (the
// reference's `sandbox` option): the pipeline spawns prefix[0] with
// prefix[1:], then the command and its args. It is called after the intent
// row, with the per-call workdir.
type SandboxFunc func(workdir string, req *Request) ([]string, error)

// Config is the shared dispatch configuration every provider fills in from
// its own options. Zero durations and sizes are unset and take the
// reference defaults (the reference keeps an explicit timeoutMs 0, which
// kills every tool at once, and maxOutputBytes 0, which discards stdout;
// Go has no separate spelling for them, and Posture attests what runs);
// negative ones are refused by NewPipeline.
type Config struct {
	// Name is the provider's name, used in log lines ("subprocess").
	Name string
	// Timeout is the wall-clock ceiling from spawn; MaxOutputBytes the
	// per-stream cap.
	Timeout        time.Duration
	MaxOutputBytes int
	// KillGrace is the time between SIGTERM and SIGKILL. Zero is
	// DefaultKillGrace unless KillGraceSet says it was given: then SIGKILL
	// follows the SIGTERM at once, as the reference's killGraceMs 0 does.
	// The providers' WithKillGrace options set both.
	KillGrace    time.Duration
	KillGraceSet bool
	// DrainTimeout bounds the wait for the pipes once the tree is gone.
	DrainTimeout time.Duration
	// WorkdirBase is the parent of the per-call workdirs (default
	// os.TempDir()); WorkdirPrefix starts their names ("rulvar-exec-").
	WorkdirBase   string
	WorkdirPrefix string
	// AllowEnv names host variables copied into the tool's environment when
	// set; LookupEnv reads them (default os.LookupEnv).
	AllowEnv  []string
	LookupEnv func(string) (string, bool)
	// Credentials mints per-call variables.
	Credentials CredentialsFunc
	// Sandbox is the launcher argv prefix.
	Sandbox SandboxFunc
	// Ledger receives the intent (when it is an IntentLedger) and outcome
	// rows; nil records nothing.
	Ledger Ledger
	// Command is the fallback command when the tool's spec has none; Args
	// are prepended to the spec's args.
	Command string
	Args    []string
	// ResolveCommand makes the pipeline resolve what it starts (the
	// command, or the sandbox prefix's first word) on the host, against the
	// tool environment's PATH, after the intent row: a missing or
	// non-executable program is a spawn error whose outcome row the ledger
	// holds, as the reference's spawn failure is. Providers whose command is
	// resolved inside a sandbox, or that start a CLI of their own, leave it
	// false.
	ResolveCommand bool
	// Now is the clock for startedAt and durationMs (default time.Now).
	Now func() time.Time
	// Logger receives warnings (default: discarded).
	Logger *slog.Logger
	// Messages adjusts the reference wording for a provider whose messages
	// differ (the container executor, contract 6.4); zero is the
	// subprocess executor's wording.
	Messages Messages
	// Diagnose, when set, is shown a child that ended with a non-zero
	// status, with its captured stderr; an *Error it returns replaces the
	// plain exit error (a provider recognising its launcher's own failures,
	// such as a container CLI that could not start the container).
	Diagnose func(req *Request, status ExitStatus, stderr []byte) *Error
}

// Messages is the per-provider part of the failure messages.
type Messages struct {
	// Prefix comes before "tool '<tool>'" in the timeout, aborted,
	// output-cap, exit and ledger messages ("container ").
	Prefix string
	// NoCommand replaces the fix named by the config error for a tool
	// without a command (default "set executorSpec.command on the tool or
	// command on the executor").
	NoCommand string
	// OmitExitSignal leaves the " (signal SIG)" part out of the exit
	// message.
	OmitExitSignal bool
}

// Pipeline runs dispatches under one Config.
type Pipeline struct {
	cfg Config
}

// NewPipeline validates cfg, applies the defaults and returns a pipeline.
// Every problem is a config *Error naming the field.
func NewPipeline(cfg Config) (*Pipeline, error) {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, newError(CodeConfig, nil, format, args...))
	}
	if cfg.Timeout < 0 {
		bad("timeout %v is negative; use a positive duration such as 30s", cfg.Timeout)
	}
	if cfg.KillGrace < 0 {
		bad("kill grace %v is negative; use a positive duration such as 2s", cfg.KillGrace)
	}
	if cfg.MaxOutputBytes < 0 {
		bad("output cap %d is negative; use a positive byte count such as 1048576", cfg.MaxOutputBytes)
	}
	if cfg.DrainTimeout < 0 {
		bad("drain timeout %v is negative", cfg.DrainTimeout)
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.KillGrace == 0 && !cfg.KillGraceSet {
		cfg.KillGrace = DefaultKillGrace
	}
	cfg.KillGraceSet = true // resolved: zero from here on means SIGKILL at once
	if cfg.MaxOutputBytes == 0 {
		cfg.MaxOutputBytes = DefaultMaxOutputBytes
	}
	if cfg.DrainTimeout == 0 {
		cfg.DrainTimeout = DefaultDrainTimeout
	}
	if cfg.WorkdirBase == "" {
		cfg.WorkdirBase = os.TempDir()
	}
	if cfg.WorkdirPrefix == "" {
		cfg.WorkdirPrefix = "rulvar-exec-"
	}
	if err := checkWorkdirBase(cfg.WorkdirBase); err != nil {
		errs = append(errs, err)
	}
	if cfg.LookupEnv == nil {
		cfg.LookupEnv = os.LookupEnv
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	// What killed processes of this user left: their workdirs.
	workdir.Sweep(cfg.Logger)
	return &Pipeline{cfg: cfg}, nil
}

// Config returns the resolved configuration (defaults applied).
func (p *Pipeline) Config() Config { return p.cfg }

// checkWorkdirBase refuses a workdir base that is missing, not a directory
// or not writable, so the mistake shows at construction, not at the first
// dispatch.
func checkWorkdirBase(base string) error {
	fi, err := os.Stat(base)
	if err != nil {
		return newError(CodeConfig, err, "workdir base %q is not usable: %v; create it or choose another directory", base, err)
	}
	if !fi.IsDir() {
		return newError(CodeConfig, nil, "workdir base %q is not a directory; choose a directory for the per-call workdirs", base)
	}
	if err := unix.Access(base, unix.W_OK|unix.X_OK); err != nil {
		return newError(CodeConfig, err, "workdir base %q is not writable by this process (%v); choose a writable directory", base, fmt.Errorf("access: %w", err))
	}
	return nil
}
