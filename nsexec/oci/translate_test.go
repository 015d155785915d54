package oci

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/nsexec"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// podmanSpec is the shape of the config podman 4.3 writes as root for
// `podman run --network none` (trimmed to what Translate reads).
func podmanSpec() *specs.Spec {
	u := uint32(0o022)
	pids := int64(2048)
	return &specs.Spec{
		Version:  specs.Version,
		Root:     &specs.Root{Path: "rootfs"},
		Hostname: "c1",
		Process: &specs.Process{Args: []string{"/bin/true"}, Env: []string{"PATH=/bin"}, Cwd: "/",
			User:         specs.User{UID: 0, GID: 0, Umask: &u},
			Capabilities: &specs.LinuxCapabilities{Bounding: []string{"CAP_CHOWN"}},
			Rlimits:      []specs.POSIXRlimit{{Type: "RLIMIT_NOFILE", Hard: 1024, Soft: 1024}}},
		Mounts: []specs.Mount{
			{Destination: "/proc", Type: "proc", Source: "proc"},
			{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
			{Destination: "/sys", Type: "sysfs", Source: "sysfs"},
			{Destination: "/dev/pts", Type: "devpts", Source: "devpts"},
			{Destination: "/dev/mqueue", Type: "mqueue", Source: "mqueue"},
			{Destination: "/etc/hosts", Type: "bind", Source: "/run/x/hosts", Options: []string{"bind", "rprivate"}},
			{Destination: "/dev/shm", Type: "bind", Source: "/var/x/shm", Options: []string{"bind", "rprivate", "nosuid"}},
			{Destination: "/sys/fs/cgroup", Type: "cgroup", Source: "cgroup", Options: []string{"relatime", "ro"}},
			{Destination: "/scratch", Type: "tmpfs", Source: "tmpfs", Options: []string{"size=1m", "relatime"}},
		},
		Linux: &specs.Linux{
			Sysctl:        map[string]string{"net.ipv4.ping_group_range": "0 0"},
			Resources:     &specs.LinuxResources{Devices: []specs.LinuxDeviceCgroup{{Allow: false, Access: "rwm"}}, Pids: &specs.LinuxPids{Limit: &pids}},
			Namespaces:    []specs.LinuxNamespace{{Type: "pid"}, {Type: "network"}, {Type: "ipc"}, {Type: "uts"}, {Type: "mount"}},
			MaskedPaths:   []string{"/proc/acpi", "/proc/kcore", "/proc/keys", "/proc/latency_stats", "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi", "/sys/firmware"},
			ReadonlyPaths: []string{"/proc/asound", "/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"},
		},
	}
}

func TestTranslatePodmanConfig(t *testing.T) {
	p, err := Translate(podmanSpec(), "/b", true)
	if err != nil {
		t.Fatalf("podman's config: %v", err)
	}
	c := p.Config
	if c.Rootfs != "/b/rootfs" || c.Hostname != "c1" || c.UID != 0 || c.GID != 0 || !c.ExactIDs || c.Cwd != "" {
		t.Fatalf("config: %+v", c)
	}
	if len(c.Mounts) != 2 || c.Mounts[0].Destination != "/etc/hosts" || c.Mounts[1].Destination != "/scratch" {
		t.Fatalf("mounts: want the hosts bind and the tmpfs only (moat provides the rest), got %+v", c.Mounts)
	}
	if got := strings.Join(c.Mounts[0].Options, ","); got != "bind,rprivate,rw" {
		t.Fatalf("a bind without ro is read-write as in OCI: options %q", got)
	}
	if got := strings.Join(c.Mounts[1].Options, ","); got != "size=1048576,relatime" {
		t.Fatalf("tmpfs options: %q, want the size in bytes", got)
	}
	if !c.Sysfs || !c.Mqueue || !c.RootfsWritable {
		t.Fatalf("sysfs %v, mqueue %v, writable root %v: want moat's own sysfs and mqueue, and the root writable (root.readonly unset)", c.Sysfs, c.Mqueue, c.RootfsWritable)
	}
	if c.Sysctl["net.ipv4.ping_group_range"] != "0 0" || len(c.MaskedPaths) != 9 || len(c.ReadonlyPaths) != 6 {
		t.Fatalf("sysctl %v, masked %v, read-only %v", c.Sysctl, c.MaskedPaths, c.ReadonlyPaths)
	}
	if p.Resources == nil || p.Resources.Pids == nil || *p.Resources.Pids.Limit != 2048 || p.Resources.Memory != nil {
		t.Fatalf("resources: %+v", p.Resources)
	}
	if p.UIDMap != nil || p.GIDMap != nil || !p.IDMapMounts {
		t.Fatalf("no user namespace in the config: moat's own range, id-mapped mounts; got %+v %+v %v", p.UIDMap, p.GIDMap, p.IDMapMounts)
	}
	if !c.ReadOnlyTopOnly {
		t.Fatalf("a bind's ro must be runc's, of its top mount alone: ReadOnlyTopOnly unset")
	}
	if c.Umask == nil || *c.Umask != 0o022 {
		t.Fatalf("umask: %v, want process.user.umask's 022", c.Umask)
	}
	s := podmanSpec()
	s.Process.User.Umask = new(uint32(0o002))
	if p, err := Translate(s, "/b", true); err != nil || p.Config.Umask == nil || *p.Config.Umask != 0o002 {
		t.Fatalf("umask 002: %v, want it passed on", err)
	}
	if c.Caps == nil || *c.Caps != (nsexec.Capabilities{Bounding: 1 << 0}) {
		t.Fatalf("capabilities: %+v, want CAP_CHOWN in the bounding set", c.Caps)
	}
	if len(p.Targets) != 6 || p.Targets[2] != (Target{Path: "/tmp", Dir: true}) || p.Targets[3] != (Target{Path: "/sys", Dir: true}) ||
		p.Targets[4] != (Target{Path: "/etc/hosts"}) || p.Targets[5] != (Target{Path: "/scratch", Dir: true}) {
		t.Fatalf("targets: %+v", p.Targets)
	}
}

// TestTranslateRefuses: each unsupported field is refused with its JSON
// path, all at once.
func TestTranslateRefuses(t *testing.T) {
	cases := []struct {
		field string
		edit  func(s *specs.Spec)
	}{
		{"linux.namespaces", func(s *specs.Spec) { s.Linux.Namespaces = s.Linux.Namespaces[:1] }},
		{"linux.namespaces[5].path", func(s *specs.Spec) {
			s.Linux.Namespaces = append(s.Linux.Namespaces, specs.LinuxNamespace{Type: "user", Path: "/proc/1/ns/user"})
		}},
		{"linux.namespaces[4].path", func(s *specs.Spec) { s.Linux.Namespaces[4].Path = "/proc/1/ns/mnt" }},
		{"linux.namespaces[2].path", func(s *specs.Spec) { s.Linux.Namespaces[2].Path = "ns/ipc" }},
		{"linux.namespaces[5]", func(s *specs.Spec) {
			s.Linux.Namespaces = append(s.Linux.Namespaces, specs.LinuxNamespace{Type: "ipc"})
		}},
		{"process.oomScoreAdj", func(s *specs.Spec) { v := -1001; s.Process.OOMScoreAdj = &v }},
		{"linux.sysctl.fs.mqueue.msg_max", func(s *specs.Spec) {
			s.Linux.Namespaces[2].Path = "/run/pod/ipc"
			s.Linux.Sysctl["fs.mqueue.msg_max"] = "100"
		}},
		{"linux.namespaces[5]", func(s *specs.Spec) {
			s.Linux.Namespaces = append(s.Linux.Namespaces, specs.LinuxNamespace{Type: "time"})
		}},
		{"hooks.createContainer", func(s *specs.Spec) { s.Hooks = &specs.Hooks{CreateContainer: []specs.Hook{{Path: "/bin/true"}}} }},
		{"hooks.startContainer", func(s *specs.Spec) { s.Hooks = &specs.Hooks{StartContainer: []specs.Hook{{Path: "/bin/true"}}} }},
		{"hooks.poststop[1].path", func(s *specs.Spec) {
			s.Hooks = &specs.Hooks{Poststop: []specs.Hook{{Path: "/bin/true"}, {Path: "true"}}}
		}},
		{"hooks.prestart[0].timeout", func(s *specs.Spec) {
			s.Hooks = &specs.Hooks{Prestart: []specs.Hook{{Path: "/bin/true", Timeout: new(0)}}}
		}},
		{"hostname", func(s *specs.Spec) { s.Hostname = "c1\n10.0.0.1 bank.example" }},
		{"process.user", func(s *specs.Spec) { s.Process.User.UID = 1<<32 - 1 }},
		{"process.user.umask", func(s *specs.Spec) { s.Process.User.Umask = new(uint32(0o1022)) }},
		{"linux.sysctl.kernel.panic", func(s *specs.Spec) { s.Linux.Sysctl["kernel.panic"] = "1" }},
		{"linux.sysctl.vm.swappiness", func(s *specs.Spec) { s.Linux.Sysctl["vm.swappiness"] = "1" }},
		{"linux.maskedPaths[9]", func(s *specs.Spec) { s.Linux.MaskedPaths = append(s.Linux.MaskedPaths, "etc/shadow") }},
		{"linux.readonlyPaths[6]", func(s *specs.Spec) { s.Linux.ReadonlyPaths = append(s.Linux.ReadonlyPaths, "/proc/../etc") }},
		{"linux.devices[0].type", func(s *specs.Spec) { s.Linux.Devices = []specs.LinuxDevice{{Path: "/dev/kvm"}} }},
		{"linux.devices[0]", func(s *specs.Spec) {
			s.Linux.Devices = []specs.LinuxDevice{{Path: "/dev/none", Type: "c", Major: 4095, Minor: 1048575}}
		}},
		{"linux.devices[0].path", func(s *specs.Spec) {
			s.Linux.Devices = []specs.LinuxDevice{{Path: "/etc/null", Type: "c", Major: 1, Minor: 3}}
		}},
		{"linux.devices[1].path", func(s *specs.Spec) {
			s.Linux.Devices = []specs.LinuxDevice{{Path: "/dev/n", Type: "c", Major: 1, Minor: 3}, {Path: "/dev/n", Type: "c", Major: 1, Minor: 5}}
		}},
		{"linux.devices[0].path", func(s *specs.Spec) {
			s.Linux.Devices = []specs.LinuxDevice{{Path: "/dev/pts/0", Type: "c", Major: 1, Minor: 3}}
		}},
		{"linux.rootfsPropagation", func(s *specs.Spec) { s.Linux.RootfsPropagation = "rrshared" }},
		{"mounts[9].type", func(s *specs.Spec) { s.Mounts = append(s.Mounts, specs.Mount{Destination: "/n", Type: "nfs"}) }},
		{"mounts[9].options[0]", func(s *specs.Spec) {
			s.Mounts = append(s.Mounts, specs.Mount{Destination: "/n", Type: "bind", Source: "/x", Options: []string{"dev"}})
		}},
		{"mounts[9].options[1]", func(s *specs.Spec) {
			s.Mounts = append(s.Mounts, specs.Mount{Destination: "/n", Type: "tmpfs", Options: []string{"z", "suid"}})
		}},
		{"mounts[9].destination", func(s *specs.Spec) {
			s.Mounts = append(s.Mounts, specs.Mount{Destination: "/dev/kvm", Type: "bind", Source: "/dev/kvm"})
		}},
		{"process.capabilities.permitted[0]", func(s *specs.Spec) { s.Process.Capabilities.Permitted = []string{"CAP_TELEPORT"} }},
		{"process.apparmorProfile", func(s *specs.Spec) { s.Process.ApparmorProfile = "containers-default" }},
		{"linux.resources", func(s *specs.Spec) { s.Linux.Resources.Network = &specs.LinuxNetwork{} }},
		{"linux.resources.memory.disableOOMKiller", func(s *specs.Spec) {
			yes := true
			s.Linux.Resources.Memory = &specs.LinuxMemory{DisableOOMKiller: &yes}
		}},
		{"linux.resources.cpu", func(s *specs.Spec) {
			b := uint64(1000)
			s.Linux.Resources.CPU = &specs.LinuxCPU{Burst: &b}
		}},
		{"mounts[9].uidMappings", func(s *specs.Spec) {
			s.Mounts = append(s.Mounts, specs.Mount{Destination: "/n", Type: "bind", Source: "/x",
				UIDMappings: []specs.LinuxIDMapping{{ContainerID: 0, HostID: 1000, Size: 1}}})
		}},
		{"linux.uidMappings", func(s *specs.Spec) {
			s.Linux.Namespaces = append(s.Linux.Namespaces, specs.LinuxNamespace{Type: "user"})
			s.Linux.UIDMappings = []specs.LinuxIDMapping{{ContainerID: 0, HostID: 0, Size: 65536}}
			s.Linux.GIDMappings = s.Linux.UIDMappings
		}},
		{"root.path", func(s *specs.Spec) { s.Root = nil }},
		{"process.rlimits[1].type", func(s *specs.Spec) {
			s.Process.Rlimits = append(s.Process.Rlimits, specs.POSIXRlimit{Type: "RLIMIT_TEST"})
		}},
	}
	for _, c := range cases {
		s := podmanSpec()
		c.edit(s)
		_, err := Translate(s, "/b", true)
		var ue *UnsupportedError
		if !errors.As(err, &ue) {
			t.Errorf("%s: got %v, want an UnsupportedError", c.field, err)
			continue
		}
		if ue.Field != c.field || ue.Reason == "" {
			t.Errorf("%s: refused as %q (%v)", c.field, ue.Field, err)
		}
	}
	// Two problems: both named.
	s := podmanSpec()
	s.Hooks = &specs.Hooks{CreateContainer: []specs.Hook{{Path: "/x"}}}
	s.Linux.Devices = []specs.LinuxDevice{{Path: "/dev/kvm"}}
	_, err := Translate(s, "/b", true)
	if err == nil || !strings.Contains(err.Error(), "hooks") || !strings.Contains(err.Error(), "linux.devices") {
		t.Fatalf("every refusal at once: got %v", err)
	}
}

// TestTranslateJoins: the namespaces a config names a path for are joined
// (the engine's network, a pod sandbox's ipc, uts, pid); the sysctls of a
// joined network namespace are the runtime's to write, those of its own
// namespaces the init's; a joined network or ipc namespace gets no sysfs
// or mqueue, and the note says so. A config that shares the host's (no
// entry) is still refused.
func TestTranslateJoins(t *testing.T) {
	s := podmanSpec()
	s.Linux.Namespaces[0].Path = "/proc/7/ns/pid"
	s.Linux.Namespaces[1].Path = "/run/netns/netns-1"
	s.Linux.Namespaces[2].Path = "/proc/7/ns/ipc"
	s.Linux.Namespaces[3].Path = "/proc/7/ns/uts"
	s.Linux.Sysctl["net.ipv4.ip_unprivileged_port_start"] = "0"
	p, err := Translate(s, "/b", true)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Joins) != 4 || p.Joins[1] != (specs.LinuxNamespace{Type: "network", Path: "/run/netns/netns-1"}) {
		t.Fatalf("joins: %+v", p.Joins)
	}
	if len(p.NetSysctl) != 2 || p.NetSysctl["net.ipv4.ip_unprivileged_port_start"] != "0" || len(p.Config.Sysctl) != 0 {
		t.Fatalf("net sysctls of a joined network namespace: runtime %v, init %v", p.NetSysctl, p.Config.Sysctl)
	}
	if p.Config.Sysfs || p.Config.Mqueue || !p.JoinedSysfs || !p.JoinedMqueue {
		t.Fatal("a sysfs or an mqueue in joined namespaces, or not left to the runtime (JoinedSysfs, JoinedMqueue)")
	}
	// The engine's /dev/shm goes with the pod's ipc namespace.
	if !slices.ContainsFunc(p.Config.Mounts, func(m specs.Mount) bool { return m.Destination == "/dev/shm" && m.Source == "/var/x/shm" }) {
		t.Fatalf("the pod's /dev/shm is not bound: %+v", p.Config.Mounts)
	}
	if notes := strings.Join(p.Notes, "\n"); !strings.Contains(notes, "/sys") || !strings.Contains(notes, "/dev/mqueue") {
		t.Fatalf("notes do not say what /sys and /dev/mqueue are: %s", notes)
	}
	for _, tg := range p.Targets {
		if tg.Path == "/sys" {
			t.Fatal("a /sys target without a sysfs")
		}
	}
}

// TestTranslateMapping: a config's own user namespace maps the process's
// ids onto the host ids its mappings give them (podman --userns=auto),
// never onto host root.
func TestTranslateMapping(t *testing.T) {
	s := podmanSpec()
	s.Process.User.UID, s.Process.User.GID = 5, 6
	s.Linux.Namespaces = append(s.Linux.Namespaces, specs.LinuxNamespace{Type: "user"})
	s.Linux.UIDMappings = []specs.LinuxIDMapping{{ContainerID: 0, HostID: 100000, Size: 65536}}
	s.Linux.GIDMappings = []specs.LinuxIDMapping{{ContainerID: 0, HostID: 200000, Size: 65536}}
	p, err := Translate(s, "/b", true)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.UIDMap) != 1 || p.UIDMap[0] != (nsexec.IDMap{Inside: 0, Host: 100000, Size: 65536}) ||
		len(p.GIDMap) != 1 || p.GIDMap[0] != (nsexec.IDMap{Inside: 0, Host: 200000, Size: 65536}) || p.IDMapMounts {
		t.Fatalf("maps: %+v %+v (id-mapped mounts %v), want the config's own and no moat-chosen id map", p.UIDMap, p.GIDMap, p.IDMapMounts)
	}
	// moat's own reserved host ids are not an engine's to map.
	s.Linux.UIDMappings = []specs.LinuxIDMapping{{ContainerID: 0, HostID: nsexec.HostRangeFirst, Size: 65536}}
	if _, err := Translate(s, "/b", true); err == nil || !strings.Contains(err.Error(), "moat's") {
		t.Fatalf("a map into moat's range space: %v, want a refusal naming it", err)
	}
	s.Linux.UIDMappings = []specs.LinuxIDMapping{{ContainerID: 0, HostID: 100000, Size: 65536}}
	s.Process.User.UID = 70000 // outside the mapping
	if _, err := Translate(s, "/b", true); err == nil {
		t.Fatal("an unmapped process uid was accepted")
	}
	// A range running past 2^32-1 must not wrap onto a low host id.
	s.Process.User.UID = 7
	s.Linux.UIDMappings = []specs.LinuxIDMapping{{ContainerID: 0, HostID: 4294967290, Size: 100}}
	if p, err := Translate(s, "/b", true); err == nil {
		t.Fatalf("a mapping wrapping past 2^32-1 was accepted: maps %+v", p.UIDMap)
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"65536k": 64 << 20, "4096": 4096, "2m": 2 << 20, "1G": 1 << 30} {
		if got, err := parseSize(in); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"0", "-1", "50%", "", "k", "99999999999999999999"} {
		if _, err := parseSize(in); err == nil {
			t.Errorf("parseSize(%q) accepted", in)
		}
	}
}

// TestCreateTargetsStaysInRoot: a symlink planted in the image cannot make
// the runtime create a mount target outside the root: it is resolved as
// inside the root, and a link to a host path is refused, not followed.
func TestCreateTargetsStaysInRoot(t *testing.T) {
	root := t.TempDir()
	outside := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "real"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, target := range map[string]string{"etc": outside, "file": filepath.Join(outside, "f"), "inside": "/real"} {
		if err := os.Symlink(target, filepath.Join(root, name)); err != nil {
			t.Fatal(err)
		}
	}
	for _, tg := range []Target{{Path: "/etc/hosts"}, {Path: "/etc/d", Dir: true}} {
		if err := CreateTargets(root, []Target{tg}); err == nil {
			t.Errorf("target %s through a link to a host path: created", tg.Path)
		}
	}
	if err := CreateTargets(root, []Target{{Path: "/file"}, {Path: "/inside/hosts"}, {Path: "/run/x", Dir: true}}); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Fatalf("a target was created outside the root: %v", entries)
	}
	if _, err := os.Stat(filepath.Join(root, "real", "hosts")); err != nil {
		t.Fatalf("the target through an in-root link was not created inside the root: %v", err)
	}
	if st, err := os.Stat(filepath.Join(root, "run", "x")); err != nil || !st.IsDir() {
		t.Fatalf("directory target: %v", err)
	}
}

// TestTranslateDevices: a config's device becomes a bind of the host's
// node of that number, found below /dev whatever its name; a device moat's
// /dev has (/dev/null) is met by moat's own; the mode asked is noted, not
// given; rootfsPropagation is kept.
func TestTranslateDevices(t *testing.T) {
	s := podmanSpec()
	mode := os.FileMode(0o666)
	s.Linux.Devices = []specs.LinuxDevice{
		{Path: "/dev/null", Type: "c", Major: 1, Minor: 3},
		{Path: "/dev/sub/mynull", Type: "u", Major: 1, Minor: 3, FileMode: &mode},
	}
	s.Linux.RootfsPropagation = "rslave"
	p, err := Translate(s, "/b", true)
	if err != nil {
		t.Fatal(err)
	}
	want := []nsexec.Device{{Path: "/dev/sub/mynull", Source: "/dev/null", Type: "c", Major: 1, Minor: 3}}
	if !reflect.DeepEqual(p.Config.Devices, want) {
		t.Errorf("devices %+v, want %+v", p.Config.Devices, want)
	}
	if !strings.Contains(strings.Join(p.Notes, "\n"), "/dev/sub/mynull") {
		t.Errorf("no note says the host's mode stays: %q", p.Notes)
	}
	if p.Config.RootfsPropagation != "rslave" {
		t.Errorf("rootfsPropagation %q, want rslave", p.Config.RootfsPropagation)
	}
}
