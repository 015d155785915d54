package main

import (
	"testing"

	"github.com/moat-sandbox/moat/conformance"
	"github.com/moat-sandbox/moat/executor"
	"github.com/moat-sandbox/moat/executor/subprocess"
)

// moat run as the sandbox launcher prefix of another executor: the
// reference's subprocess provider with `moat run --workdir W --inherit-env
// --` in front of every tool passes the whole kit, isolation and hostile
// battery included. The outer executor has already replaced the
// environment, so --inherit-env passes it on unchanged.
func TestMoatRunAsSandboxPrefix(t *testing.T) {
	bothIdentities(t)
	moatPath := moatBin(t)
	conformance.Run(t, func(t *testing.T, cfg conformance.Config) executor.Provider {
		prefix := func(workdir string, _ *executor.Request) ([]string, error) {
			return []string{moatPath, "run", "--workdir", workdir, "--inherit-env",
				"--bind", cfg.RunnerDir + ":" + cfg.RunnerDir, "--"}, nil
		}
		opts := []subprocess.Option{
			subprocess.WithCommand(cfg.Command, cfg.Args...),
			subprocess.WithSandbox(prefix),
			subprocess.WithAllowEnv(cfg.AllowEnv...),
			subprocess.WithTimeout(cfg.Timeout),
			subprocess.WithMaxOutputBytes(cfg.MaxOutputBytes),
			subprocess.WithCredentials(cfg.Credentials),
		}
		if cfg.Ledger != nil {
			opts = append(opts, subprocess.WithLedger(cfg.Ledger))
		}
		p, err := subprocess.New(opts...)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}, conformance.WithIsolation(conformance.Isolation{Filesystem: true, Network: true, PIDs: true, Privileges: true, SetID: true, Seccomp: true}))
}
