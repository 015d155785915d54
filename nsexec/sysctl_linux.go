package nsexec

import (
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/moat-sandbox/moat/nsexec/internal/resolve"
	"golang.org/x/sys/unix"
)

// Sysctl namespaces: a sysctl a sandbox may set belongs to one of its own
// namespaces, so setting it changes nothing outside (runc's rule,
// libcontainer/configs/validate: kernel.{msg,sem,shm}* and fs.mqueue.* for
// the ipc namespace, net.* for the network namespace).
const (
	SysctlIPC = "ipc"
	SysctlNet = "net"
)

// ipcSysctls are the ipc namespace's kernel.* sysctls (ipc/ipc_sysctl.c);
// fs.mqueue.* are all its too (ipc/mq_sysctl.c).
var ipcSysctls = map[string]bool{
	"kernel.shmmax": true, "kernel.shmall": true, "kernel.shmmni": true, "kernel.shm_rmid_forced": true,
	"kernel.msgmax": true, "kernel.msgmnb": true, "kernel.msgmni": true, "kernel.sem": true,
	"kernel.shm_next_id": true, "kernel.msg_next_id": true, "kernel.sem_next_id": true,
}

// SysctlKind says which namespace owns the sysctl key (sysctl(8)'s dotted
// form: net.ipv4.ip_forward; a '/' in a component stands for a dot in a
// name, net.ipv4.conf.eth0/100.forwarding), SysctlIPC or SysctlNet, or
// returns "" and why it is refused: a sysctl that is not namespaced would
// change the host.
func SysctlKind(key string) (string, string) {
	if _, err := sysctlPath(key); err != nil {
		return "", err.Error()
	}
	switch {
	case ipcSysctls[key], strings.HasPrefix(key, "fs.mqueue."):
		return SysctlIPC, ""
	case strings.HasPrefix(key, "net."):
		return SysctlNet, ""
	case key == "kernel.hostname", key == "kernel.domainname":
		return "", "is set through the config's hostname, not as a sysctl"
	}
	return "", "is not a namespaced sysctl (a sandbox may set kernel.shm*, kernel.msg*, kernel.sem, fs.mqueue.* and net.*): setting it would change the host"
}

// sysctlPath turns a sysctl key into its path below /proc/sys, or says why
// it is not one: every component a plain name, no "." or ".." that could
// walk elsewhere.
func sysctlPath(key string) (string, error) {
	parts := strings.Split(key, ".")
	if len(parts) < 2 {
		return "", fmt.Errorf("is not a sysctl name (dotted, as sysctl(8) writes it: net.ipv4.ip_forward)")
	}
	for i, p := range parts {
		p = strings.ReplaceAll(p, "/", ".")
		if p == "" || p == "." || p == ".." || strings.ContainsFunc(p, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("_-.@:+", r))
		}) {
			return "", fmt.Errorf("has a component %q that is not a sysctl name", parts[i])
		}
		parts[i] = p
	}
	return strings.Join(parts, "/"), nil
}

// checkSysctls checks a Config's sysctls: each namespaced, each value one
// line without a NUL (procfs reads a write as the value).
func checkSysctls(m map[string]string) error {
	for k, v := range m {
		if kind, why := SysctlKind(k); kind == "" {
			return &ConfigError{Field: "sysctl." + k, Value: v, Reason: why}
		}
		if strings.ContainsAny(v, "\x00\n") {
			return &ConfigError{Field: "sysctl." + k, Value: v, Reason: "a value is one line without a NUL"}
		}
	}
	return nil
}

// writeSysctls writes each sysctl through proc, the sandbox's fresh
// procfs, from the init, which is in the sandbox's own ipc and network
// namespaces: a sysctl below /proc/sys/net or of the ipc namespace is the
// writer's namespace's, whatever procfs it is reached through
// (net/sysctl_net.c net_ctl_header_lookup, ipc/ipc_sysctl.c). The
// kernel's checks: a net.* sysctl needs CAP_NET_ADMIN over the network
// namespace, which the init holds; an ipc one is writable only by uid 0 of
// the namespace's user namespace (ipc_permissions), so the sandbox's
// process must be uid 0 there.
func writeSysctls(proc int, m map[string]string) error {
	for _, k := range sortedKeys(m) {
		rel, err := sysctlPath(k)
		if err != nil {
			return stepErr(StepSysctl, k, err.Error(), unix.EINVAL)
		}
		if err := writeSysctl(proc, "sys/"+rel, m[k]); err != nil {
			return stepErr(StepSysctl, "/proc/sys/"+rel, k+"="+m[k], err)
		}
	}
	return nil
}

// writeSysctl writes value to the sysctl file at rel below dir, resolved
// beneath it with no symlink followed.
func writeSysctl(dir int, rel, value string) error {
	fd, err := resolve.Openat2(dir, rel, &unix.OpenHow{Flags: unix.O_WRONLY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS})
	if err != nil {
		return err
	}
	werr := writeAll(fd, []byte(value+"\n"))
	if err := unix.Close(fd); werr == nil {
		werr = err
	}
	return werr
}

// WriteNetSysctls sets net.* sysctls in the network namespace open at
// netns, one the sandbox joins and so cannot write itself: it belongs to
// the engine's user namespace, where the sandbox holds no capability. They
// are written here, from a thread of their own that joined the namespace
// (InNamespace), through the caller's /proc/sys: a net sysctl is the
// writing thread's namespace's. Each key must be a net.* sysctl; the
// caller needs CAP_NET_ADMIN over the namespace (root, or the rootless
// engine's root for a namespace of that engine). The host's network
// namespace (the caller's own, pid 1's) is refused as WithJoin refuses it,
// with nothing written.
func WriteNetSysctls(netns *os.File, m map[string]string) error {
	if len(m) == 0 {
		return nil
	}
	if err := checkSysctls(m); err != nil {
		return err
	}
	for k := range m {
		if kind, _ := SysctlKind(k); kind != SysctlNet {
			return &ConfigError{Field: "sysctl." + k, Value: m[k], Reason: "only net.* sysctls belong to a network namespace"}
		}
	}
	// The host's is refused before anything is written: this runs before
	// the spawn that would refuse it too (WithJoin's check, the same).
	if _, err := checkJoin(nsJoin{f: netns, want: unix.CLONE_NEWNET}); err != nil {
		return err
	}
	return InNamespace(netns, func() error {
		dir, err := unix.Open("/proc/sys", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("set sysctls: open /proc/sys: %w", err)
		}
		defer unix.Close(dir)
		for _, k := range sortedKeys(m) {
			rel, _ := sysctlPath(k)
			if err := writeSysctl(dir, rel, m[k]); err != nil {
				return fmt.Errorf("set sysctl %s=%s in the network namespace %s: %w", k, m[k], netns.Name(), err)
			}
		}
		return nil
	})
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
