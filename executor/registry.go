package executor

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
)

// Tool is what a tool declares about where it runs (the ToolDef fields that
// matter to executors, contract 2.5).
type Tool struct {
	Name string
	// Executor is the declared tag: "inprocess" (the default when empty),
	// "subprocess" or "container".
	Executor string
	// Spec is the executorSpec handed to the provider verbatim.
	Spec json.RawMessage
}

// Registry maps isolated executor tags to providers (the reference's
// ExecutorRegistry) and checks tools against it before anything runs.
type Registry struct {
	mu        sync.RWMutex
	providers map[string]Provider
}

// isolatedTags are the only tags a provider can be registered under.
var isolatedTags = map[string]bool{"subprocess": true, "container": true}

// Register binds a provider to a tag; only "subprocess" and "container" are
// isolated executor tags.
func (r *Registry) Register(tag string, p Provider) error {
	if !isolatedTags[tag] {
		return newError(CodeConfig, nil, "register executor '%s': the isolated executor tags are 'subprocess' and 'container'", tag)
	}
	if p == nil {
		return newError(CodeConfig, nil, "register executor '%s': the provider is nil", tag)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.providers == nil {
		r.providers = map[string]Provider{}
	}
	r.providers[tag] = p
	return nil
}

// Bind checks tools at toolset resolution, before any provider or model
// call: every tool that declares an isolated executor must find it
// registered (contract 2.6). All problems are reported at once.
func (r *Registry) Bind(tools ...Tool) error {
	r.mu.RLock()
	defer r.mu.RUnlock()
	var errs []error
	for _, t := range tools {
		if !isToolName(t.Name) {
			errs = append(errs, newError(CodeConfig, nil, "tool name %q is not allowed; names must match ^[a-zA-Z0-9_-]{1,64}$", t.Name))
			continue
		}
		if t.Executor == "" || t.Executor == "inprocess" {
			continue
		}
		if _, ok := r.providers[t.Executor]; !ok {
			errs = append(errs, newError(CodeConfig, nil, "tool '%s' declares executor '%s', but no such executor is registered; register one via createEngine({ executors }) (https://docs.rulvar.com/guide/isolated-executor)", t.Name, t.Executor))
		}
	}
	return errors.Join(errs...)
}

// Dispatch routes a request to the provider registered for its tag; a
// missing one is a config error inside the call (defence in depth).
func (r *Registry) Dispatch(ctx context.Context, req *Request) (json.RawMessage, error) {
	tag := executorTag(req)
	r.mu.RLock()
	p, ok := r.providers[tag]
	r.mu.RUnlock()
	if !ok {
		return nil, newError(CodeConfig, nil, "no executor registered for '%s'; register one via createEngine({ executors }) (https://docs.rulvar.com/guide/isolated-executor)", tag)
	}
	return p.Dispatch(ctx, req)
}
