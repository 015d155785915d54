package oci

import (
	"encoding/json"
	"errors"
	"math"
	"path/filepath"
	"testing"

	"github.com/moat-sandbox/moat/nsexec"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// FuzzTranslateConfig fuzzes config.json, which an engine (or whoever can
// write the bundle) hands moat-runtime: decoded as LoadBundle decodes it,
// Translate either returns a Plan whose Config holds only what the sandbox
// accepts (a program, an absolute root, a clean absolute cwd, a one-line
// hostname, no invalid id, clean absolute mount destinations) or refuses
// with *UnsupportedError values only, each naming its config.json field.
func FuzzTranslateConfig(f *testing.F) {
	b, err := json.Marshal(podmanSpec())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add([]byte(`{"ociVersion":"1.0.2","root":{"path":"rootfs","readonly":true},"process":{"args":["sh"],"cwd":"/","user":{"uid":0,"gid":0}},"hostname":"c"}`))
	f.Add([]byte(`{"root":{"path":"/abs/root"},"process":{"args":["x"],"cwd":"rel"},"hostname":"a\nb","mounts":[{"destination":"/d/../e","type":"bind","source":"s"}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var spec specs.Spec
		if json.Unmarshal(data, &spec) != nil {
			return // encoding/json's own refusal, as LoadBundle reports it
		}
		for _, hostRoot := range []bool{true, false} {
			p, err := Translate(&spec, "/b", hostRoot)
			if err != nil {
				for _, e := range leaves(err) {
					var ue *UnsupportedError
					if !errors.As(e, &ue) || ue != e || ue.Field == "" || ue.Reason == "" {
						t.Fatalf("refused with %T %v, want *UnsupportedError naming a field", e, e)
					}
				}
				continue
			}
			c := p.Config
			switch {
			case len(p.Args) == 0 || p.Args[0] == "":
				t.Fatalf("a plan without a program: %+v", p)
			case !filepath.IsAbs(c.Rootfs):
				t.Fatalf("root %q", c.Rootfs)
			case c.Cwd != "" && (!filepath.IsAbs(c.Cwd) || filepath.Clean(c.Cwd) != c.Cwd):
				t.Fatalf("cwd %q", c.Cwd)
			case c.Hostname != "" && nsexec.HostnameProblem(c.Hostname) != "":
				t.Fatalf("hostname %q: %s", c.Hostname, nsexec.HostnameProblem(c.Hostname))
			case c.UID == math.MaxUint32 || c.GID == math.MaxUint32:
				t.Fatalf("ids %d:%d", c.UID, c.GID)
			}
			for i, m := range c.Mounts {
				if !filepath.IsAbs(m.Destination) || filepath.Clean(m.Destination) != m.Destination {
					t.Fatalf("mount %d destination %q", i, m.Destination)
				}
			}
		}
	})
}

// leaves flattens a join of errors.
func leaves(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, leaves(e)...)
		}
		return out
	}
	return []error{err}
}
