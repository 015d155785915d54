package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/cgroups"
	"github.com/moat-sandbox/moat/nsexec"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/opencontainers/runtime-spec/specs-go/features"
)

func TestParseGlobal(t *testing.T) {
	g, rest, err := parseGlobal([]string{"--root", "/r", "--log=/l", "--log-format", "json", "--systemd-cgroup=false", "--debug", "create", "--bundle", "b", "id"})
	if err != nil || g.root != "/r" || g.logPath != "/l" || g.logFormat != "json" || !g.debug || strings.Join(rest, " ") != "create --bundle b id" {
		t.Fatalf("got %+v %q %v", g, rest, err)
	}
	// An engine on the systemd driver passes --systemd-cgroup to every
	// command; create alone acts on it.
	if g, _, err := parseGlobal([]string{"--systemd-cgroup", "state", "x"}); err != nil || !g.systemdCgroup {
		t.Errorf("--systemd-cgroup: %+v, %v", g, err)
	}
	for _, bad := range [][]string{{"--log-format", "xml", "state"}, {"--nope", "state"}, {"--root"}} {
		if _, _, err := parseGlobal(bad); err == nil {
			t.Errorf("parseGlobal(%q) accepted", bad)
		}
	}
}

func TestParseCommand(t *testing.T) {
	o, flags, err := parseCreate([]string{"-b", "/b", "id1", "--pid-file=/p", "--no-pivot"})
	if err != nil || o.bundle != "/b" || o.pidFile != "/p" || o.id != "id1" || !flags["no-pivot"] {
		t.Fatalf("got %+v %v %v", o, flags, err)
	}
	if _, _, err := parseCreate([]string{"--preserve-fds", "2", "id"}); err == nil || !strings.Contains(err.Error(), "preserve-fds") {
		t.Fatalf("--preserve-fds 2: %v", err)
	}
	if _, _, err := parseCreate([]string{"a", "b"}); err == nil {
		t.Fatal("two IDs accepted")
	}
}

// TestJSONLog: with --log and --log-format json, a failed command leaves
// the record containerd's shim reads its reason from.
func TestJSONLog(t *testing.T) {
	root := t.TempDir()
	logf := filepath.Join(t.TempDir(), "log.json")
	_, errs, code := rt(t, root, "--log", logf, "--log-format", "json", "state", "missing")
	if code != 1 || !strings.Contains(errs, "does not exist") {
		t.Fatalf("state of a missing container: exit %d: %s", code, errs)
	}
	b, err := os.ReadFile(logf)
	if err != nil {
		t.Fatal(err)
	}
	var rec struct{ Level, Msg string }
	if err := json.Unmarshal(b, &rec); err != nil || rec.Level != "error" || !strings.Contains(rec.Msg, "does not exist") {
		t.Fatalf("log %q: %+v %v", b, rec, err)
	}
}

// TestFeatures: the features document is valid JSON of the runtime-spec
// type and says what moat does and does not do (the hooks of the runtime
// namespace only, no AppArmor, the systemd cgroup driver only where
// systemd is the host's init, never the user's).
func TestFeatures(t *testing.T) {
	out, errs, code := rt(t, t.TempDir(), "features")
	if code != 0 {
		t.Fatalf("features: exit %d: %s", code, errs)
	}
	var f features.Features
	if err := json.Unmarshal([]byte(out), &f); err != nil {
		t.Fatalf("features %q: %v", out, err)
	}
	if f.Linux == nil || strings.Join(f.Hooks, ",") != "prestart,createRuntime,poststart,poststop" || *f.Linux.Cgroup.Systemd != cgroups.SystemdBooted() || *f.Linux.Cgroup.SystemdUser || *f.Linux.Apparmor.Enabled || !*f.Linux.Seccomp.Enabled || len(f.Linux.Namespaces) != 7 {
		t.Fatalf("features: %s", out)
	}
	// Every mount option it names is one nsexec builds, on a bind (an
	// id-mapped one for idmap and ridmap) or a tmpfs.
	maps := []specs.LinuxIDMapping{{ContainerID: 0, HostID: 100000, Size: 65536}}
	for _, o := range f.MountOptions {
		m := specs.Mount{Type: "bind", Source: "/x", Destination: "/y", Options: []string{o}}
		if o == "idmap" || o == "ridmap" {
			m.UIDMappings, m.GIDMappings = maps, maps
		}
		bind := nsexec.CheckMount(&m, 0)
		tmpfs := nsexec.CheckMount(&specs.Mount{Type: "tmpfs", Destination: "/y", Options: []string{o}}, 0)
		if bind != nil && tmpfs != nil {
			t.Errorf("features names mount option %q, which nsexec refuses: %v", o, bind)
		}
	}
}
