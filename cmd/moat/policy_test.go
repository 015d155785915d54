package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/policies"
)

func runPolicy(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := policyCmd(args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestPolicyList(t *testing.T) {
	code, out, _ := runPolicy("list")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, name := range policies.Builtins() {
		if !strings.Contains(out, name+" ") {
			t.Errorf("list lacks %s:\n%s", name, out)
		}
	}
}

func TestPolicyShow(t *testing.T) {
	code, out, errs := runPolicy("show", "python")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var p policies.Policy
	if err := json.Unmarshal([]byte(out), &p); err != nil || p.Name != "python" || p.Extends != "" || p.Seccomp == nil {
		t.Fatalf("show python: %v\n%s", err, out)
	}
	code, _, errs = runPolicy("show", "nope")
	if code != 1 || !strings.Contains(errs, "default") {
		t.Errorf("show nope: exit %d, %q (want 1 and the built-ins listed)", code, errs)
	}
}

func TestPolicyCheck(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.json")
	os.WriteFile(good, []byte(`{"name": "good", "extends": "default", "network": "loopback"}`), 0o644)
	bad := filepath.Join(dir, "bad.json")
	os.WriteFile(bad, []byte(`{"network": "internet", "limits": {"memory": "12 parsecs", "pids": -3}}`), 0o644)

	if code, out, errs := runPolicy("check", good); code != 0 || !strings.Contains(out, "valid (sha256:") {
		t.Errorf("check good: exit %d, %q %q", code, out, errs)
	}
	code, _, errs := runPolicy("check", bad)
	if code != 1 {
		t.Errorf("check bad: exit %d", code)
	}
	for _, want := range []string{"4 problem(s)", "network:", `limits.memory: "12 parsecs" is not a size`, "limits.pids:", "seccomp: is missing"} {
		if !strings.Contains(errs, want) {
			t.Errorf("check bad: %q lacks %q", errs, want)
		}
	}
	for _, args := range [][]string{{}, {"check"}, {"show", "a", "b"}, {"frobnicate"}} {
		if code, _, _ := runPolicy(args...); code != 64 {
			t.Errorf("%q: exit %d, want 64", args, code)
		}
	}
}

// Unknown fields, wrong types and invalid values are reported together,
// each with its JSON path, not one kind after the other is fixed; a
// problem that only follows from a dropped field is not added.
func TestPolicyCheckReportsEveryKindAtOnce(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.json")
	os.WriteFile(bad, []byte(`{"netwrok": "none", "extends": "default", "limits": {"memory": "12 parsecs", "pids": "many"}, "mounts": [{"destination": "/x", "type": "bind", "source": "/y", "options": "ro"}]}`), 0o644)
	code, _, errs := runPolicy("check", bad)
	if code != 1 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{"4 problem(s)", "netwrok: is not a known field", `limits.pids: "many" has the wrong type`,
		`mounts[0].options: "ro" has the wrong type; want an array`, `limits.memory: "12 parsecs" is not a size`} {
		if !strings.Contains(errs, want) {
			t.Errorf("check: %q lacks %q", errs, want)
		}
	}
	// Loading keeps strict semantics: the same file is refused as a policy.
	if _, err := policies.Load(bad); err == nil {
		t.Error("policies.Load accepted the file")
	}
}
