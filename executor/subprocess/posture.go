package subprocess

import "github.com/moat-sandbox/moat/executor"

// Posture is the provider's regulated posture descriptor (contract 10.1),
// from its resolved configuration; it does no I/O.
func (p *Provider) Posture() executor.Posture {
	cfg := p.pipeline.Config()
	return cfg.Posture("subprocess", &executor.Isolation{Flavor: executor.FlavorSubprocess, Sandboxed: cfg.Sandbox != nil})
}
