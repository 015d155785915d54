// Package subprocess is the reference's subprocess executor: each tool call
// runs as an ordinary child process in its own process group, with a
// replaced environment, a fresh workdir, the protocol on its stdio and the
// two-phase ledger around it. It isolates nothing by itself; the Sandbox
// option prepends a launcher (such as `moat run`) that does.
package subprocess

import (
	"context"
	"encoding/json"
	"log/slog"
	"time"

	"github.com/moat-sandbox/moat/executor"
)

// Provider is the subprocess executor.
type Provider struct {
	pipeline *executor.Pipeline
}

// Option configures a Provider.
type Option func(*executor.Config)

// WithTimeout sets the wall-clock ceiling from spawn (default 30 s; zero is
// the default, as leaving it out). A fraction of a millisecond runs and is
// attested as it is (timeoutMs 1500.5).
func WithTimeout(d time.Duration) Option { return func(c *executor.Config) { c.Timeout = d } }

// WithKillGrace sets the SIGTERM to SIGKILL grace (default 2 s, when the
// option is left out). Zero sends SIGKILL right after the SIGTERM, as the
// reference's killGraceMs 0.
func WithKillGrace(d time.Duration) Option {
	return func(c *executor.Config) { c.KillGrace, c.KillGraceSet = d, true }
}

// WithMaxOutputBytes sets the per-stream output cap (default 1 MiB; zero is
// the default, as leaving it out).
func WithMaxOutputBytes(n int) Option { return func(c *executor.Config) { c.MaxOutputBytes = n } }

// WithWorkdirBase sets the parent of the per-call workdirs (default the
// system temporary directory).
func WithWorkdirBase(dir string) Option { return func(c *executor.Config) { c.WorkdirBase = dir } }

// WithAllowEnv names host variables copied into the tool's environment.
func WithAllowEnv(names ...string) Option {
	return func(c *executor.Config) { c.AllowEnv = append(c.AllowEnv, names...) }
}

// WithLookupEnv replaces os.LookupEnv as the source of allowlisted values.
func WithLookupEnv(f func(string) (string, bool)) Option {
	return func(c *executor.Config) { c.LookupEnv = f }
}

// WithCredentials mints per-call environment variables.
func WithCredentials(f executor.CredentialsFunc) Option {
	return func(c *executor.Config) { c.Credentials = f }
}

// WithSandbox prepends a launcher argv to every command; it receives the
// per-call workdir.
func WithSandbox(f executor.SandboxFunc) Option { return func(c *executor.Config) { c.Sandbox = f } }

// WithLedger records every dispatch in l (two-phase when l has Intent).
func WithLedger(l executor.Ledger) Option { return func(c *executor.Config) { c.Ledger = l } }

// WithCommand sets the fallback command and the args prepended to the
// spec's args.
func WithCommand(command string, args ...string) Option {
	return func(c *executor.Config) { c.Command, c.Args = command, args }
}

// WithClock replaces time.Now for startedAt and durationMs.
func WithClock(now func() time.Time) Option { return func(c *executor.Config) { c.Now = now } }

// WithLogger sets the logger for warnings (default: discarded).
func WithLogger(l *slog.Logger) Option { return func(c *executor.Config) { c.Logger = l } }

// New builds a subprocess provider. A negative timeout, grace or cap, or a
// workdir base that is not a writable directory, is a config error.
func New(opts ...Option) (*Provider, error) {
	cfg := executor.Config{Name: "subprocess", WorkdirPrefix: "rulvar-exec-", ResolveCommand: true}
	for _, o := range opts {
		o(&cfg)
	}
	p, err := executor.NewPipeline(cfg)
	if err != nil {
		return nil, err
	}
	return &Provider{pipeline: p}, nil
}

// Dispatch runs one tool call.
func (p *Provider) Dispatch(ctx context.Context, req *executor.Request) (json.RawMessage, error) {
	return p.pipeline.Dispatch(ctx, req, launcher{})
}

// Config returns the resolved configuration (defaults applied).
func (p *Provider) Config() executor.Config { return p.pipeline.Config() }
