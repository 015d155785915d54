package subprocess

import "github.com/moat-sandbox/moat/executor"

// Posture is the provider's regulated posture descriptor (contract 10.1),
// from its resolved configuration; it does no I/O.
func (p *Provider) Posture() executor.Posture {
	cfg := p.pipeline.Config()
	return executor.Posture{
		RegulatedPosture: executor.PostureVersion,
		Kind:             executor.PostureKind,
		Name:             "subprocess",
		Ledger:           cfg.Ledger != nil,
		AllowEnv:         append([]string{}, cfg.AllowEnv...),
		Bounds:           &executor.Bounds{TimeoutMs: cfg.Timeout.Milliseconds(), MaxOutputBytes: int64(cfg.MaxOutputBytes)},
		Isolation:        &executor.Isolation{Flavor: executor.FlavorSubprocess, Sandboxed: cfg.Sandbox != nil},
	}
}
