package oci

import (
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// TestTranslateHooks: the hooks of the runtime namespace, with an
// absolute path and a timeout above zero, are accepted (moat-runtime runs
// them on the host); TestTranslateRefuses has the refusals.
func TestTranslateHooks(t *testing.T) {
	s := podmanSpec()
	hook := []specs.Hook{{Path: "/usr/libexec/hook", Args: []string{"hook", "x"}, Env: []string{"A=1"}, Timeout: new(5)}}
	s.Hooks = &specs.Hooks{Prestart: hook, CreateRuntime: hook, Poststart: hook, Poststop: hook}
	if _, err := Translate(s, "/b", true); err != nil {
		t.Fatalf("hooks of the runtime namespace: %v", err)
	}
}
