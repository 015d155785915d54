package oci

import (
	"fmt"
	"path/filepath"
	"strconv"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// hooks checks config.json's hooks (runtime-spec config.md "POSIX-platform
// Hooks"). The four that run in the runtime namespace, prestart,
// createRuntime, poststart and poststop, are the engine's programs, which
// moat-runtime runs on the host as its own user, as runc does (config.json
// is the engine's trusted input); each needs an absolute path and, if
// given, a timeout above zero (the spec's MUSTs). createContainer and
// startContainer are refused: they run in the container's namespaces,
// which would take a host program, with the runtime's privileges, into
// the sandbox before its process (a setns from the host, the path runc's
// CVE-2019-5736 and CVE-2024-21626 went through), or the container's init
// running what the host names; moat's init runs nothing but the process
// and its execs.
func (t *translator) hooks() {
	h := t.spec.Hooks
	if h == nil {
		return
	}
	if len(h.CreateContainer) > 0 {
		t.refuse("hooks.createContainer", "", "moat runs no hook inside the container's namespaces (a host program with the runtime's privileges in the sandbox); use a createRuntime hook, which runs on the host")
	}
	if len(h.StartContainer) > 0 {
		t.refuse("hooks.startContainer", "", "moat runs no hook inside the container's namespaces before its process; run it as part of the process (its entrypoint)")
	}
	for _, k := range []struct {
		kind  string
		hooks []specs.Hook
	}{{"prestart", h.Prestart}, {"createRuntime", h.CreateRuntime}, {"poststart", h.Poststart}, {"poststop", h.Poststop}} {
		for i, hk := range k.hooks {
			field := fmt.Sprintf("hooks.%s[%d]", k.kind, i)
			if !filepath.IsAbs(hk.Path) {
				t.refuse(field+".path", hk.Path, "must be an absolute path (the runtime spec): moat runs no shell and looks nothing up in a PATH")
			}
			if hk.Timeout != nil && *hk.Timeout <= 0 {
				t.refuse(field+".timeout", strconv.Itoa(*hk.Timeout), "must be greater than zero (the runtime spec)")
			}
		}
	}
}
