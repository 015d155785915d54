// Package conformance is the battery any moat provider must pass, in the
// style of testing/fstest and testing/slogtest: Run takes a constructor and
// runs every check of the Rulvar executor contract (e1 to e13, section 9.3)
// as a named subtest that explains what failed.
//
// The tool program the checks dispatch is the test binary itself, copied
// under the name moat-conformance-runner: a test package that uses the kit
// calls Main from its TestMain, which turns such a copy into the runner.
//
//	func TestMain(m *testing.M) { conformance.Main(m) }
//
//	func TestConformance(t *testing.T) {
//		conformance.Run(t, func(t *testing.T, cfg conformance.Config) executor.Provider {
//			p, err := subprocess.New(subprocess.WithCommand(cfg.Command, cfg.Args...), ...)
//			...
//		})
//	}
package conformance

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/conformance/testenv"
	"github.com/moat-sandbox/moat/executor"
	"github.com/moat-sandbox/moat/nsexec"
)

// Main is the TestMain body of a package that runs the kit: in a sandbox
// init it becomes the sandbox (nsexec.Init); in the runner copy it runs the
// runner program and exits; otherwise it skips the examples whose need
// this host lacks (testenv.ExamplesNeed), runs the tests, then the
// cleanups.
func Main(m *testing.M, cleanups ...func()) {
	nsexec.Init() // a sandbox init started by a provider under test never returns
	if isRunner() {
		runnerMain()
	}
	testenv.SkipExamples()
	code := m.Run()
	cleanupRunner()
	for _, c := range cleanups {
		c()
	}
	os.Exit(code)
}

// Config is what a check asks of the provider under test (the reference's
// ConformanceExecutorConfig). Zero values mean the provider's defaults.
type Config struct {
	// Command and Args start the runner program; RunnerDir is the directory
	// holding it, which a sandboxing provider must make visible (read-only)
	// at the same path inside the sandbox.
	Command   string
	Args      []string
	RunnerDir string
	// AllowEnv, Credentials, Timeout, MaxOutputBytes and Ledger configure
	// the provider as the check needs.
	AllowEnv       []string
	Credentials    executor.CredentialsFunc
	Timeout        time.Duration
	MaxOutputBytes int
	Ledger         executor.Ledger
	// KillGrace, when set, is the SIGTERM to SIGKILL grace; a grace of
	// zero is the reference's killGraceMs 0, SIGKILL right after the
	// SIGTERM. Nil is the provider's default (the reference's kit never
	// passes one).
	KillGrace *time.Duration
}

// Factory builds the provider under test for one check.
type Factory func(t *testing.T, cfg Config) executor.Provider

// Run runs every reference check (e1 to e13, e13j), the reference's
// behaviours its kit leaves out (r1 to r3), then every isolation check the
// provider claims, against providers built by newProvider.
func Run(t *testing.T, newProvider Factory, opts ...Option) {
	t.Helper()
	var rc runConfig
	for _, o := range opts {
		o(&rc)
	}
	runner, err := runnerPath()
	if err != nil {
		t.Fatalf("conformance: prepare the runner program: %v", err)
	}
	for _, c := range append(slices.Clone(checks), departureChecks...) {
		t.Run(c.id+"_"+c.name, func(t *testing.T) {
			c.run(&kit{t: t, id: c.id, runner: runner, factory: newProvider, isolation: rc.isolation})
		})
	}
	for _, c := range isolationChecks {
		t.Run(c.id+"_"+c.name, func(t *testing.T) {
			if !c.claim(rc.isolation) {
				t.Skipf("the provider does not claim this isolation")
			}
			c.run(&kit{t: t, id: c.id, runner: runner, factory: newProvider, isolation: rc.isolation})
		})
	}
}

var (
	runnerOnce sync.Once
	runnerFile string
	runnerErr  error
)

// runnerPath copies the test binary, once per process, into a fresh 0755
// directory under the name RunnerName: a copy (not a link) so that it works
// for another user and inside a sandbox that binds only that directory.
func runnerPath() (string, error) {
	runnerOnce.Do(func() { runnerFile, runnerErr = testenv.CopySelf(RunnerName) })
	return runnerFile, runnerErr
}

func cleanupRunner() {
	if runnerFile != "" {
		os.RemoveAll(filepath.Dir(runnerFile))
	}
}

// kit is the state of one check.
type kit struct {
	t       *testing.T
	id      string
	runner  string
	factory Factory
	// isolation is what the provider claims (WithIsolation).
	isolation Isolation
}

// provider builds the provider under test with the runner as its command.
func (k *kit) provider(cfg Config) executor.Provider {
	cfg.Command = k.runner
	cfg.RunnerDir = filepath.Dir(k.runner)
	return k.factory(k.t, cfg)
}

// request builds a request with the kit's fixed context (contract 9.2).
func (k *kit) request(tool, args string) *executor.Request {
	return &executor.Request{
		Executor:       "subprocess",
		Tool:           tool,
		Args:           []byte(args),
		Spec:           []byte("{}"),
		RunID:          "conf-run",
		SpanID:         "conf-span",
		AgentType:      "conf",
		IdempotencyKey: "conf-key",
	}
}

func (k *kit) fatalf(format string, args ...any) {
	k.t.Helper()
	k.t.Fatalf("executor-conformance "+k.id+": "+format, args...)
}

// dispatch runs one request under a generous test deadline.
func (k *kit) dispatch(p executor.Provider, req *executor.Request) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	return p.Dispatch(ctx, req)
}
