package policies

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func TestBuiltins(t *testing.T) {
	want := []string{"default", "node", "python", "shell", "strict"}
	if got := Builtins(); !slices.Equal(got, want) {
		t.Fatalf("Builtins() = %v, want %v", got, want)
	}
	for _, name := range want {
		p, err := Builtin(name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if p.Name != name || p.Extends != "" || p.Seccomp == nil || p.Identity == nil {
			t.Errorf("%s: resolved policy %+v", name, p)
		}
	}
	d, _ := Builtin("default")
	l := d.Limits
	if l.Memory != "256M" || l.Pids != 128 || l.CPUs != 1 || l.Timeout != "30s" || l.OutputCap != "1M" || l.TmpfsSize != "64M" {
		t.Errorf("default limits %+v", l)
	}
	if d.Rootfs != RootfsHost || d.Network != NetworkNone || *d.Identity != (Identity{UID: 1000, GID: 1000}) {
		t.Errorf("default policy %+v", d)
	}
	py, _ := Builtin("python")
	if py.Limits.Memory != "512M" || py.Limits.Pids != 128 || !reflect.DeepEqual(py.Seccomp, d.Seccomp) {
		t.Errorf("python must override memory, inherit pids and the seccomp profile: %+v", py.Limits)
	}
	st, _ := Builtin("strict")
	if n := countNames(st); n >= countNames(d) {
		t.Errorf("strict allows %d syscall names, default %d: strict must allow fewer", n, countNames(d))
	}
}

func countNames(p *Policy) int {
	n := 0
	for _, r := range p.Seccomp.Syscalls {
		if r.Action == "SCMP_ACT_ALLOW" {
			n += len(r.Names)
		}
	}
	return n
}

func TestParseReportsEveryProblem(t *testing.T) {
	doc := `{
  "name": "bad",
  "network": "internet",
  "rootfs": "relative/dir",
  "mounts": [{"destination": "/data", "source": "rel", "options": ["ro", "suid"]}],
  "limits": {"memory": "12 parsecs", "pids": -1, "cpus": -2, "timeout": "soon", "required": ["disk", "pids"]},
  "rlimits": [{"type": "RLIMIT_FOO", "hard": 1, "soft": 2}],
  "env": ["OK", "NOT OK"],
  "seccomp": {"defaultAction": "SCMP_ACT_MAYBE", "architectures": ["SCMP_ARCH_Z80"],
    "syscalls": [{"names": [""], "action": "SCMP_ACT_ALLOW", "args": [{"index": 7, "value": 1, "op": "SCMP_CMP_ABOUT"}]}]}
}`
	_, err := Parse(strings.NewReader(doc))
	fes := FieldErrors(err)
	got := map[string]string{}
	for _, fe := range fes {
		got[fe.Path] = fe.Error()
	}
	for _, path := range []string{"network", "rootfs", "mounts[0].source", "mounts[0].options[1]",
		"limits.memory", "limits.pids", "limits.cpus", "limits.timeout", "limits.required[0]",
		"rlimits[0].type", "rlimits[0].soft", "env[1]", "seccomp.defaultAction",
		"seccomp.architectures[0]", "seccomp.syscalls[0].names[0]", "seccomp.syscalls[0].args[0].index",
		"seccomp.syscalls[0].args[0].op"} {
		if _, ok := got[path]; !ok {
			t.Errorf("no error for %s", path)
		}
	}
	if want := `limits.memory: "12 parsecs" is not a size; use bytes or a suffix like 256M`; got["limits.memory"] != want {
		t.Errorf("memory error %q, want %q", got["limits.memory"], want)
	}
	if len(fes) != len(got) {
		t.Errorf("duplicate paths in %v", fes)
	}
}

func TestParseStrictDecoding(t *testing.T) {
	cases := map[string]struct{ doc, path string }{
		"top":          {`{"nmae": "x"}`, "nmae"},
		"nested":       {`{"limits": {"memroy": "1M"}}`, "limits.memroy"},
		"in array":     {`{"seccomp": {"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [{"names": ["read"], "action": "SCMP_ACT_ALLOW", "comment": "x"}]}}`, "seccomp.syscalls[0].comment"},
		"letter case":  {`{"Limits": {}}`, "Limits"},
		"wrong type":   {`{"limits": {"pids": "many"}}`, "limits.pids"},
		"uid negative": {`{"identity": {"uid": -1, "gid": 0}}`, "identity.uid"},
		// Two equal keys: encoding/json would keep the last without a word.
		"duplicate":        {`{"network": "loopback", "unfiltered": true, "network": "none"}`, "network"},
		"duplicate nested": {`{"seccomp": {"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [{"names": [{}], "names": ["read"], "action": "SCMP_ACT_ALLOW"}]}}`, "seccomp.syscalls[0].names"},
		// Keys a dotted path could not show are quoted.
		"empty key":  {`{"": 0}`, `[""]`},
		"dotted key": {`{"limits": {"a.b": 1}}`, `limits["a.b"]`},
	}
	for name, c := range cases {
		_, err := Parse(strings.NewReader(c.doc))
		fes := FieldErrors(err)
		if len(fes) == 0 || fes[0].Path != c.path {
			t.Errorf("%s: got %v, want a field error at %s", name, err, c.path)
		}
	}
	for name, doc := range map[string]string{
		"trailing": `{"name": "a"} {"name": "b"}`, "garbage": `{"name": "a"} x`,
		"array": `[]`, "empty": ``, "truncated": `{"name": `,
	} {
		if _, err := Parse(strings.NewReader(doc)); err == nil {
			t.Errorf("%s: accepted %q", name, doc)
		}
	}
	if _, err := Parse(strings.NewReader("{\"name\": \"ok\", \"unfiltered\": true}\n\n")); err != nil {
		t.Errorf("trailing white space refused: %v", err)
	}
}

func write(t *testing.T, dir, name, doc string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestExtendsMerging(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "base.json", `{"name": "base", "extends": "default",
	  "mounts": [{"destination": "/data", "source": "/srv/a", "options": ["ro"]}, {"destination": "/cache", "type": "tmpfs"}],
	  "limits": {"memory": "128M", "required": ["memory"]},
	  "rlimits": [{"type": "RLIMIT_NOFILE", "hard": 64, "soft": 64}],
	  "env": ["HOME"]}`)
	child := write(t, dir, "child.json", `{"name": "child", "extends": "./base.json", "network": "loopback",
	  "mounts": [{"destination": "/data", "source": "/srv/b", "options": ["ro"]}],
	  "limits": {"pids": 8, "required": ["pids"]},
	  "rlimits": [{"type": "RLIMIT_NOFILE", "hard": 32, "soft": 16}],
	  "env": ["HOME", "LANG", "USER"]}`)
	p, err := Load(child)
	if err != nil {
		t.Fatal(err)
	}
	d, _ := Builtin("default")
	if p.Name != "child" || p.Network != NetworkLoopback || p.Rootfs != RootfsHost {
		t.Errorf("scalars: %+v", p)
	}
	if len(p.Mounts) != 2 || p.Mounts[0].Source != "/srv/b" || p.Mounts[1].Destination != "/cache" {
		t.Errorf("mounts: %+v", p.Mounts)
	}
	if p.Limits.Memory != "128M" || p.Limits.Pids != 8 || p.Limits.Timeout != "30s" || !slices.Equal(p.Limits.Required, []string{"memory", "pids"}) {
		t.Errorf("limits: %+v", p.Limits)
	}
	if len(p.Rlimits) != 2 || p.Rlimits[1].Type != "RLIMIT_NOFILE" || p.Rlimits[1].Soft != 16 {
		t.Errorf("rlimits: %+v", p.Rlimits)
	}
	if !slices.Equal(p.Env, []string{"LANG", "LC_ALL", "TZ", "HOME", "USER"}) {
		t.Errorf("env: %v", p.Env)
	}
	if !reflect.DeepEqual(p.Seccomp, d.Seccomp) {
		t.Error("seccomp not inherited")
	}
	// Resolving must not have changed the built-in for the next caller.
	if d2, _ := Builtin("default"); d2.Limits.Memory != "256M" {
		t.Error("built-in modified by a merge")
	}
}

func TestExtendsCycleAndDepth(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "a.json", `{"name": "a", "extends": "b.json"}`)
	write(t, dir, "b.json", `{"name": "b", "extends": "a.json"}`)
	var ee *ExtendsError
	if _, err := Load(filepath.Join(dir, "a.json")); !errors.As(err, &ee) || !strings.Contains(ee.Reason, "cycle") {
		t.Errorf("cycle: got %v", err)
	}
	write(t, dir, "self.json", `{"name": "self", "extends": "self.json"}`)
	if _, err := Load(filepath.Join(dir, "self.json")); !errors.As(err, &ee) {
		t.Errorf("self cycle: got %v", err)
	}
	for i := 0; i <= MaxExtendsDepth+1; i++ {
		ext := "default"
		if i > 0 {
			ext = filepath.Join(dir, "d"+string(rune('a'+i-1))+".json")
		}
		write(t, dir, "d"+string(rune('a'+i))+".json", `{"extends": "`+ext+`"}`)
	}
	// d<k> follows k+1 extends.
	if _, err := Load(filepath.Join(dir, "d"+string(rune('a'+MaxExtendsDepth-1))+".json")); err != nil {
		t.Errorf("a chain of %d must load: %v", MaxExtendsDepth, err)
	}
	if _, err := Load(filepath.Join(dir, "d"+string(rune('a'+MaxExtendsDepth))+".json")); !errors.As(err, &ee) {
		t.Errorf("a chain deeper than %d: got %v", MaxExtendsDepth, err)
	}
}

func TestLoadMissing(t *testing.T) {
	var nf *NotFoundError
	_, err := Load("no-such-policy")
	if !errors.As(err, &nf) || !slices.Equal(nf.Builtins, Builtins()) || !strings.Contains(err.Error(), "default") {
		t.Fatalf("got %v", err)
	}
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("want it to wrap os.ErrNotExist: %v", err)
	}
	if _, err := Builtin("../etc/passwd"); !errors.As(err, &nf) {
		t.Errorf("Builtin with a path: %v", err)
	}
}

func TestRequiredFromBase(t *testing.T) {
	dir := t.TempDir()
	ok := write(t, dir, "ok.json", `{"extends": "default", "limits": {"required": ["memory"]}}`)
	if _, err := Load(ok); err != nil {
		t.Errorf("memory set by the base must satisfy required: %v", err)
	}
	bad := write(t, dir, "bad.json", `{"limits": {"required": ["memory"]}, "unfiltered": true}`)
	if _, err := Load(bad); len(FieldErrors(err)) != 1 {
		t.Errorf("required without the limit: got %v", err)
	}
}

func TestDigestAndRoundTrip(t *testing.T) {
	for _, name := range Builtins() {
		p, _ := Builtin(name)
		b, err := p.MarshalIndent()
		if err != nil {
			t.Fatal(err)
		}
		back, err := Parse(strings.NewReader(string(b)))
		if err != nil {
			t.Fatalf("%s: shown JSON does not parse: %v", name, err)
		}
		if !reflect.DeepEqual(back, p) {
			t.Errorf("%s: round trip differs", name)
		}
		d1, _ := p.Digest()
		d2, _ := back.Digest()
		if d1 != d2 || !strings.HasPrefix(d1, "sha256:") || len(d1) != 71 {
			t.Errorf("%s: digest %q vs %q", name, d1, d2)
		}
	}
	d, _ := Builtin("default")
	py, _ := Builtin("python")
	dd, _ := d.Digest()
	pd, _ := py.Digest()
	ds, _ := d.SeccompDigest()
	ps, _ := py.SeccompDigest()
	if dd == pd || ds != ps {
		t.Errorf("policies differ but share a digest, or share a profile but not its digest")
	}
}

func TestSizes(t *testing.T) {
	for in, want := range map[Size]int64{"": 0, "1048576": 1 << 20, "64K": 64 << 10, "256M": 256 << 20, "256MiB": 256 << 20, "1g": 1 << 30, "2T": 2 << 40, "10B": 10} {
		if got, err := in.Bytes(); err != nil || got != want {
			t.Errorf("%q: %d %v, want %d", in, got, err, want)
		}
	}
	for _, in := range []Size{"12 parsecs", "M", "-1M", "1.5G", "99999999999T", "1 M B"} {
		if _, err := in.Bytes(); err == nil {
			t.Errorf("%q accepted", in)
		}
	}
}

// TestNoFilterNeedsAStatement is issue 13 item 8: `{"name":"bare"}` and a
// profile that allows everything validated and ran with no filter and no
// word said. Now only a policy that states "unfiltered": true runs without
// an effective filter, and each refusal names the JSON path and the fix.
func TestNoFilterNeedsAStatement(t *testing.T) {
	refused := map[string]struct{ doc, path string }{
		"bare":               {`{"name": "bare"}`, "seccomp"},
		"allow everything":   {`{"name": "a", "seccomp": {"defaultAction": "SCMP_ACT_ALLOW"}}`, "seccomp.defaultAction"},
		"log everything":     {`{"name": "a", "seccomp": {"defaultAction": "SCMP_ACT_LOG", "syscalls": [{"names": ["read"], "action": "SCMP_ACT_ALLOW"}]}}`, "seccomp.defaultAction"},
		"both said":          {`{"name": "a", "unfiltered": true, "seccomp": {"defaultAction": "SCMP_ACT_ERRNO"}}`, "unfiltered"},
		"only limits":        {`{"limits": {"memory": "1G"}}`, "seccomp"},
		"extends, allow all": {`{"extends": "default", "seccomp": {"defaultAction": "SCMP_ACT_ALLOW"}}`, "seccomp.defaultAction"},
	}
	for name, c := range refused {
		t.Run(name, func(t *testing.T) {
			p, err := Parse(strings.NewReader(c.doc))
			if err == nil {
				_, err = Resolve(p)
			}
			fes := FieldErrors(err)
			if len(fes) != 1 || fes[0].Path != c.path {
				t.Fatalf("got %v, want one field error at %s", err, c.path)
			}
			if c.path != "unfiltered" && !strings.Contains(fes[0].Reason, `"unfiltered": true`) {
				t.Fatalf("the error does not name the fix: %v", fes[0])
			}
		})
	}
	accepted := map[string]struct {
		doc        string
		unfiltered bool
	}{
		"stated":           {`{"name": "bare", "unfiltered": true}`, true},
		"denylist":         {`{"name": "d", "seccomp": {"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"names": ["ptrace"], "action": "SCMP_ACT_ERRNO"}]}}`, false},
		"extends default":  {`{"extends": "default"}`, false},
		"drops the filter": {`{"extends": "default", "unfiltered": true}`, true},
	}
	for name, c := range accepted {
		t.Run(name, func(t *testing.T) {
			p, err := Parse(strings.NewReader(c.doc))
			if err != nil {
				t.Fatal(err)
			}
			r, err := Resolve(p)
			if err != nil {
				t.Fatal(err)
			}
			if r.Unfiltered != c.unfiltered || r.Filters() == c.unfiltered || (c.unfiltered && r.Seccomp != nil) {
				t.Fatalf("unfiltered %v, filters %v, seccomp %v; want unfiltered %v", r.Unfiltered, r.Filters(), r.Seccomp != nil, c.unfiltered)
			}
		})
	}
	// A profile over an unfiltered base filters again.
	dir := t.TempDir()
	write(t, dir, "open.json", `{"name": "open", "unfiltered": true}`)
	closed := write(t, dir, "closed.json", `{"name": "closed", "extends": "open.json", "seccomp": {"defaultAction": "SCMP_ACT_ERRNO"}}`)
	r, err := Load(closed)
	if err != nil {
		t.Fatal(err)
	}
	if r.Unfiltered || !r.Filters() {
		t.Fatalf("a profile over an unfiltered base: unfiltered %v, filters %v", r.Unfiltered, r.Filters())
	}
	// A policy built in Go and never resolved is judged the same way.
	if err := (&Policy{Name: "bare"}).CheckFilter(); len(FieldErrors(err)) != 1 {
		t.Fatalf("CheckFilter on a bare policy: %v", err)
	}
}
