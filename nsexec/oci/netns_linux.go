package oci

import (
	"os"

	"golang.org/x/sys/unix"
)

// CheckNetNS refuses a network namespace to join (a config's
// linux.namespaces path) that is the host's: the runtime's own or pid 1's.
// Joining it would give the container the host's interfaces and its
// abstract unix sockets, which belong to the network namespace (the
// containerd-shim escape, CVE-2020-15257). An engine's network is a
// namespace of its own; host networking (podman --network host) has no
// path and is refused by Translate already.
func CheckNetNS(f *os.File) error {
	var got unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &got); err != nil {
		return &UnsupportedError{Field: "linux.namespaces.path", Value: f.Name(), Reason: "cannot stat the network namespace: " + err.Error()}
	}
	for _, host := range []string{"/proc/self/ns/net", "/proc/1/ns/net"} {
		var st unix.Stat_t
		// pid 1's is unreadable rootless (ptrace rules); the runtime's own
		// is the one a rootless caller could reach then.
		if unix.Stat(host, &st) == nil && st.Dev == got.Dev && st.Ino == got.Ino {
			return &UnsupportedError{Field: "linux.namespaces.path", Value: f.Name(),
				Reason: "is the host's network namespace; moat never shares it with a container (use the engine's own network, not --network host)"}
		}
	}
	return nil
}
