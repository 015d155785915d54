package conformance_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"log/slog"
	"os"
	"testing"

	"github.com/moat-sandbox/moat/conformance"
	"github.com/moat-sandbox/moat/executor"
	"github.com/moat-sandbox/moat/executor/subprocess"
)

// loggingProvider is a provider of one's own: this one wraps moat's
// subprocess provider and logs every call. The kit checks it as it checks
// moat's providers.
type loggingProvider struct {
	inner executor.Provider
	log   *slog.Logger
}

func (p *loggingProvider) Dispatch(ctx context.Context, req *executor.Request) (json.RawMessage, error) {
	res, err := p.inner.Dispatch(ctx, req)
	p.log.Info("dispatch", "tool", req.Tool, "err", err)
	return res, err
}

// newLoggingProvider builds the provider as a check asks (cfg).
func newLoggingProvider(cfg conformance.Config, log *slog.Logger) (*loggingProvider, error) {
	opts := []subprocess.Option{
		subprocess.WithCommand(cfg.Command, cfg.Args...),
		subprocess.WithAllowEnv(cfg.AllowEnv...),
		subprocess.WithTimeout(cfg.Timeout),
		subprocess.WithMaxOutputBytes(cfg.MaxOutputBytes),
		subprocess.WithCredentials(cfg.Credentials),
	}
	if cfg.KillGrace != nil { // nil: the provider's default; 0: SIGKILL at once
		opts = append(opts, subprocess.WithKillGrace(*cfg.KillGrace))
	}
	if cfg.Ledger != nil {
		opts = append(opts, subprocess.WithLedger(cfg.Ledger))
	}
	inner, err := subprocess.New(opts...)
	if err != nil {
		return nil, err
	}
	return &loggingProvider{inner: inner, log: log}, nil
}

// factory is the conformance.Factory: the kit builds the provider under
// test with it for each check.
func factory(t *testing.T, cfg conformance.Config) executor.Provider {
	p, err := newLoggingProvider(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// testConformance is the provider's TestConformance, in a test package
// whose TestMain is conformance.Main(m): every reference check, then the
// isolation checks the provider claims with conformance.WithIsolation
// (none here: a plain process isolates nothing). TestCustomProvider runs
// it.
func testConformance(t *testing.T) { conformance.Run(t, factory) }

// The provider answers a call as the kit expects every provider to.
func Example_customProvider() {
	text := slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey {
			return slog.Attr{} // for a stable output
		}
		return a
	}})
	p, err := newLoggingProvider(conformance.Config{Command: "/bin/sh", Args: []string{"-c", `cat >/dev/null; echo '{"answer": 42}'`}}, slog.New(text))
	if err != nil {
		log.Fatal(err)
	}
	res, err := p.Dispatch(context.Background(), &executor.Request{Tool: "answer", RunID: "run-1", SpanID: "span-1", IdempotencyKey: "key"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(string(res))
	// Output:
	// level=INFO msg=dispatch tool=answer err=<nil>
	// {"answer": 42}
}
