package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/moat-sandbox/moat/policies"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// ociRunner writes an OCI bundle whose rootfs is an empty directory with
// the host's /usr (and the merged-/usr links) bound read-only, the same
// view moat and bwrap get, and runs it with `runc run` or `crun run`
// (bin is either runtime's binary). The tool's argv is fixed per
// bundle, so there is one bundle per tool, made on first use. thread, when
// set, prepares the thread the runtime is started from.
func ociRunner(bin string, cfg *config, name string, withSeccomp bool, thread func() error) (runner, error) {
	state := filepath.Join(cfg.work, fmt.Sprintf("%s-state-%d", filepath.Base(bin), os.Geteuid()))
	var profile *specs.LinuxSeccomp
	if withSeccomp {
		pol, err := policies.Builtin("default")
		if err != nil {
			return runner{}, err
		}
		profile = pol.Seccomp
	}
	bundles := map[string]string{}
	// Probe once with /bin/true, so a runtime that cannot run here is skipped
	// with its own words.
	probe, err := bundle(cfg.work, name, []string{"/bin/true"}, profile)
	if err != nil {
		return runner{}, err
	}
	err = onThread(runner{thread: thread}, func() error {
		if out, err := exec.Command(bin, "--root", state, "run", "--bundle", probe, fmt.Sprintf("moatbench-probe-%d", os.Getpid())).CombinedOutput(); err != nil {
			return fmt.Errorf("cannot run here: %v: %s", err, firstLine(out))
		}
		return nil
	})
	if err != nil {
		return runner{}, err
	}
	return runner{name: name, thread: thread, argv: func(t []string, id int) []string {
		key := fmt.Sprint(t)
		dir, ok := bundles[key]
		if !ok {
			dir, _ = bundle(cfg.work, fmt.Sprintf("%s-%d", name, len(bundles)), t, profile)
			bundles[key] = dir
		}
		return []string{bin, "--root", state, "run", "--bundle", dir, fmt.Sprintf("moatbench-%d-%d", os.Getpid(), id)}
	}}, nil
}

func firstLine(b []byte) string {
	for i, c := range b {
		if c == '\n' {
			return string(b[:i])
		}
	}
	return string(b)
}

// bundle writes config.json and the rootfs skeleton under dir/name-uid.
func bundle(work, name string, args []string, profile *specs.LinuxSeccomp) (string, error) {
	dir := filepath.Join(work, fmt.Sprintf("bundle-%s-%d", name, os.Geteuid()))
	root := filepath.Join(dir, "rootfs")
	for _, d := range []string{"usr", "proc", "dev", "tmp", "etc", "work"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			return "", err
		}
	}
	if err := os.WriteFile(filepath.Join(root, "etc", "ld.so.cache"), nil, 0o644); err != nil && !os.IsExist(err) {
		return "", err
	}
	mounts := []specs.Mount{
		{Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"nosuid", "noexec", "nodev"}},
		{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
		{Destination: "/tmp", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "nodev", "mode=1777"}},
		{Destination: "/usr", Type: "bind", Source: "/usr", Options: []string{"rbind", "ro", "nosuid", "nodev"}},
		{Destination: "/etc/ld.so.cache", Type: "bind", Source: "/etc/ld.so.cache", Options: []string{"bind", "ro"}},
	}
	for _, d := range []string{"bin", "sbin", "lib", "lib32", "lib64", "libx32"} {
		target, err := os.Readlink("/" + d)
		if err != nil {
			continue
		}
		link := filepath.Join(root, d)
		if _, err := os.Lstat(link); err != nil {
			if err := os.Symlink(target, link); err != nil {
				return "", err
			}
		}
	}
	hostID := uint32(os.Geteuid())
	if hostID == 0 {
		hostID = 2000000000 // as moat maps by default (nsexec.DefaultHostID)
	}
	spec := specs.Spec{
		// What every runtime here reads: crun 1.8 (Debian 12) refuses the
		// module's newer specs.Version, and the bundle needs nothing
		// beyond 1.0.
		Version: "1.0.2",
		Process: &specs.Process{
			Args: args, Env: []string{"PATH=/usr/bin:/bin"}, Cwd: "/work",
			User:            specs.User{UID: 0, GID: 0},
			NoNewPrivileges: true,
			Capabilities:    &specs.LinuxCapabilities{},
			Rlimits:         []specs.POSIXRlimit{{Type: "RLIMIT_NOFILE", Hard: 1024, Soft: 1024}},
		},
		Root:     &specs.Root{Path: "rootfs", Readonly: true},
		Hostname: "moat",
		Mounts:   mounts,
		Linux: &specs.Linux{
			UIDMappings: []specs.LinuxIDMapping{{ContainerID: 0, HostID: hostID, Size: 1}},
			GIDMappings: []specs.LinuxIDMapping{{ContainerID: 0, HostID: hostID, Size: 1}},
			Namespaces: []specs.LinuxNamespace{{Type: "pid"}, {Type: "network"}, {Type: "ipc"}, {Type: "uts"},
				{Type: "mount"}, {Type: "user"}},
			MaskedPaths: []string{"/proc/kcore", "/proc/keys", "/proc/timer_list", "/proc/sched_debug",
				"/proc/latency_stats", "/proc/timer_stats", "/proc/acpi", "/proc/scsi"},
			ReadonlyPaths: []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"},
			Seccomp:       profile,
		},
	}
	b, err := json.MarshalIndent(&spec, "", "  ")
	if err != nil {
		return "", err
	}
	return dir, os.WriteFile(filepath.Join(dir, "config.json"), b, 0o644)
}
