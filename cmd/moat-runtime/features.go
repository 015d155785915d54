package main

import (
	"encoding/json"
	"os"

	"github.com/moat-sandbox/moat/cgroups"
	"github.com/moat-sandbox/moat/nsexec"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/opencontainers/runtime-spec/specs-go/features"
)

// features prints the OCI features document: what a config may ask of
// moat-runtime (oci.Translate refuses the rest).
func (r *runtime) features(args []string) error {
	t, f := true, false
	systemd := cgroups.SystemdBooted()
	doc := features.Features{
		OCIVersionMin: "1.0.0",
		OCIVersionMax: specs.Version,
		// Those of the runtime namespace, run on the host (hooks.go);
		// createContainer and startContainer are refused.
		Hooks: []string{"prestart", "createRuntime", "poststart", "poststop"},
		// What nsexec builds (nsexec.CheckMount; TestFeatures checks each).
		MountOptions: []string{"ro", "rw", "rro", "rrw", "bind", "rbind", "idmap", "ridmap", "nosuid", "rnosuid", "nodev", "rnodev", "noexec", "rnoexec", "exec", "rexec",
			"nosymfollow", "rnosymfollow", "symfollow", "private", "rprivate", "unbindable", "runbindable", "shared", "rshared", "slave", "rslave",
			"relatime", "rrelatime", "noatime", "rnoatime", "strictatime", "rstrictatime", "nodiratime", "rnodiratime",
			"atime", "norelatime", "nostrictatime", "diratime", "lazytime", "nolazytime", "defaults", "async", "tmpcopyup"},
		Linux: &features.Linux{
			Namespaces: []string{"user", "mount", "pid", "network", "ipc", "uts", "cgroup"},
			// Granted inside the sandbox's user namespace only.
			Capabilities: nsexec.CapabilityNames(^uint64(0) >> (64 - nsexec.KnownCapabilities)),
			// cgroupsPath with the cgroupfs driver on v1 and v2; the
			// systemd driver (--systemd-cgroup) where systemd is the
			// host's init, as root (scopeCgroup), never the user's manager.
			Cgroup: &features.Cgroup{V1: &t, V2: &t, Systemd: &systemd, SystemdUser: &f},
			Seccomp: &features.Seccomp{Enabled: &t,
				Actions:   []string{"SCMP_ACT_ALLOW", "SCMP_ACT_ERRNO", "SCMP_ACT_KILL", "SCMP_ACT_KILL_PROCESS", "SCMP_ACT_KILL_THREAD", "SCMP_ACT_LOG", "SCMP_ACT_TRACE", "SCMP_ACT_TRAP"},
				Operators: []string{"SCMP_CMP_NE", "SCMP_CMP_LT", "SCMP_CMP_LE", "SCMP_CMP_EQ", "SCMP_CMP_GE", "SCMP_CMP_GT", "SCMP_CMP_MASKED_EQ"},
				Archs:     []string{"SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32", "SCMP_ARCH_AARCH64", "SCMP_ARCH_ARM"},
			},
			Apparmor: &features.Apparmor{Enabled: &f},
			Selinux:  &features.Selinux{Enabled: &f},
			IntelRdt: &features.IntelRdt{Enabled: &f},
			// As root (a host filesystem can be id-mapped by root alone).
			MountExtensions: &features.MountExtensions{IDMap: &features.IDMap{Enabled: &t}},
		},
		Annotations: map[string]string{"org.moat-sandbox.floor": "a user namespace that never maps host root, no host namespace, no_new_privs, a seccomp filter; capabilities inside the user namespace only"},
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(doc)
}
