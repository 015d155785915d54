// Package container is the reference's container executor (contract
// section 6): each tool call runs in a fresh container started by a
// docker-compatible CLI (docker or podman), with no network, a read-only
// root, every capability dropped, memory, cpu and pids limits, the per-call
// workdir mounted at /work, and the protocol on the CLI's stdio. The shared
// pipeline (executor.Pipeline) does the rest, so the ledger phases, the
// workdir lifecycle and the outcome classification are the subprocess
// executor's.
//
// The CLI is run as
//
//	<cli> run --rm -i --network none --memory 256m --cpus 1.0 --pids-limit 128
//	    --read-only --cap-drop ALL [--security-opt no-new-privileges]
//	    [--userns <mode> | --uidmap 0:<host>:<n> --gidmap 0:<host>:<n>]
//	    -e RULVAR_TOOL -e RULVAR_RUN_ID
//	    -e RULVAR_IDEMPOTENCY_KEY [-e <forwarded or minted name>...]
//	    -v <workdir>:/work[:U] -w /work --name moat-<attempt id>
//	    [--runtime <runtime>] [--ulimit <limit>...] [<extra args>...]
//	    <image> <command> <args...>
//
// which is the reference's argv plus --name (and the optional flags this
// package adds: no_new_privs and a user namespace, WithNoNewPrivileges and
// WithUserNS or WithIDMap, which the privilege checks i6 to i8 need;
// --runtime and --ulimit). Values never appear in argv: "-e NAME"
// makes the CLI copy the value from its own environment, which holds the
// daemonEnv host variables, the forwarded ones, the minted credentials and
// the three RULVAR_* variables, and nothing else.
//
// Stopping: the pipeline signals the CLI's process group. SIGTERM reaches
// the container through the CLI's signal proxy (docker and podman forward
// it to the container's pid 1 by default); SIGKILL cannot be proxied and,
// measured with podman 4.3, leaves the container running under its monitor
// (conmon) after the CLI is gone. So whenever the pipeline signalled the CLI,
// or the CLI died by a signal, the provider removes the container by its
// name (`<cli> rm -f moat-<attempt id>`) before the dispatch ends: a
// timed-out or cancelled container never outlives its dispatch.
package container

import (
	"context"
	"encoding/json"
	"path"

	"github.com/moat-sandbox/moat/executor"
)

// Provider is the container executor.
type Provider struct {
	pipeline *executor.Pipeline
	s        settings
}

// New builds a container provider. WithImage is required; a negative
// timeout, grace or cap, or a workdir base that is not a writable directory,
// is a config error.
func New(opts ...Option) (*Provider, error) {
	s := defaults()
	for _, o := range opts {
		o(&s)
	}
	if err := s.check(); err != nil {
		return nil, err
	}
	s.cfg.Messages = executor.Messages{
		Prefix:         "container ",
		NoCommand:      "set executorSpec.command or the executor command",
		OmitExitSignal: true,
	}
	s.cfg.Diagnose = s.diagnose
	p, err := executor.NewPipeline(s.cfg)
	if err != nil {
		return nil, err
	}
	s.cfg = p.Config()
	return &Provider{pipeline: p, s: s}, nil
}

// Dispatch runs one tool call in a fresh container.
func (p *Provider) Dispatch(ctx context.Context, req *executor.Request) (json.RawMessage, error) {
	return p.pipeline.Dispatch(ctx, req, &launcher{s: &p.s})
}

// Config returns the resolved pipeline configuration (defaults applied).
func (p *Provider) Config() executor.Config { return p.pipeline.Config() }

// Posture is the provider's regulated posture descriptor (contract 10.1).
// Its JSON, and so its Fingerprint, is the reference containerExecutor's
// member for member (network, readOnlyRoot); the dropped capabilities and
// the image ride along as Go fields only, so StrictFloor can require ALL
// dropped and a pinned digest. It does no I/O.
func (p *Provider) Posture() executor.Posture {
	return p.s.cfg.Posture("container", &executor.Isolation{
		Flavor:       executor.FlavorContainer,
		Network:      p.s.network,
		ReadOnlyRoot: p.s.readOnly,
		CapDrop:      append([]string{}, p.s.capDrop...),
		Image:        p.s.image,
	})
}

// check refuses settings the CLI could only fail on later.
func (s *settings) check() error {
	switch {
	case s.image == "":
		return &executor.Error{Code: executor.CodeConfig, Message: "container: no image; set one with container.WithImage (pin it as name@sha256:<digest> for a regulated host)"}
	case s.cli == "":
		return &executor.Error{Code: executor.CodeConfig, Message: "container: the CLI is empty; name a docker-compatible CLI with container.WithCLI (\"docker\" or \"podman\")"}
	case s.network == "":
		return &executor.Error{Code: executor.CodeConfig, Message: "container: the network is empty; use \"none\" (the default) or a network the CLI knows"}
	case !path.IsAbs(s.workMount):
		return &executor.Error{Code: executor.CodeConfig, Message: "container: the work mount " + quote(s.workMount) + " is not an absolute path; use /work (the default)"}
	}
	return nil
}

func quote(s string) string { return "'" + s + "'" }
