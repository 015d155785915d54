package nsexec

import (
	"fmt"
	"math/bits"
	"strings"
)

// Capabilities are the capability sets the tool starts with, one bit per
// capability (bit N is capability N of capabilities(7)), all of them
// capabilities in the sandbox's own user namespace: a capability there
// gives power only over what that namespace owns (its mount, network, ipc
// and uts namespaces, the ids it maps; user_namespaces(7)), never over the
// host's, which the initial user namespace owns. A nil *Capabilities is
// none in any set, the bounding set empty and the securebits locked.
//
// The tool's exec computes its sets from these as it does for any process
// (capabilities(7), "Transformation of capabilities during execve()"),
// under no_new_privs: uid 0 inside gets (Bounding | Inheritable) &
// Permitted, with Effective the same; any other uid gets Ambient alone (an
// entrypoint that drops from uid 0 to a service user loses them at its
// setuid, as with runc). So Effective only documents what the engine
// asked; Ambient is raised only where it is in Permitted and Inheritable
// too (the kernel's rule, PR_CAP_AMBIENT_RAISE).
type Capabilities struct {
	Bounding    uint64 `json:"bounding,omitempty"`
	Effective   uint64 `json:"effective,omitempty"`
	Permitted   uint64 `json:"permitted,omitempty"`
	Inheritable uint64 `json:"inheritable,omitempty"`
	Ambient     uint64 `json:"ambient,omitempty"`
}

// empty reports whether c grants nothing in any set.
func (c *Capabilities) empty() bool {
	return c == nil || c.Bounding|c.Effective|c.Permitted|c.Inheritable|c.Ambient == 0
}

// all is the union of every set: what the init must hold in its user
// namespace to hand them on.
func (c *Capabilities) all() uint64 {
	if c == nil {
		return 0
	}
	return c.Bounding | c.Effective | c.Permitted | c.Inheritable | c.Ambient
}

// KnownCapabilities is how many capabilities this build has names for
// (0 to KnownCapabilities-1).
const KnownCapabilities = len(capNames)

// capNames are the names of capabilities(7), in bit order.
var capNames = [...]string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH", "CAP_FOWNER", "CAP_FSETID", "CAP_KILL",
	"CAP_SETGID", "CAP_SETUID", "CAP_SETPCAP", "CAP_LINUX_IMMUTABLE", "CAP_NET_BIND_SERVICE",
	"CAP_NET_BROADCAST", "CAP_NET_ADMIN", "CAP_NET_RAW", "CAP_IPC_LOCK", "CAP_IPC_OWNER",
	"CAP_SYS_MODULE", "CAP_SYS_RAWIO", "CAP_SYS_CHROOT", "CAP_SYS_PTRACE", "CAP_SYS_PACCT",
	"CAP_SYS_ADMIN", "CAP_SYS_BOOT", "CAP_SYS_NICE", "CAP_SYS_RESOURCE", "CAP_SYS_TIME",
	"CAP_SYS_TTY_CONFIG", "CAP_MKNOD", "CAP_LEASE", "CAP_AUDIT_WRITE", "CAP_AUDIT_CONTROL",
	"CAP_SETFCAP", "CAP_MAC_OVERRIDE", "CAP_MAC_ADMIN", "CAP_SYSLOG", "CAP_WAKE_ALARM",
	"CAP_BLOCK_SUSPEND", "CAP_AUDIT_READ", "CAP_PERFMON", "CAP_BPF", "CAP_CHECKPOINT_RESTORE",
}

// CapabilityBits turns capability names (an OCI config's, "CAP_CHOWN"; the
// prefix may be left out, any case) into a set; a name this build does
// not know is an error naming it.
func CapabilityBits(names []string) (uint64, error) {
	var set uint64
	for _, n := range names {
		u := strings.ToUpper(n)
		if !strings.HasPrefix(u, "CAP_") {
			u = "CAP_" + u
		}
		found := false
		for i, c := range capNames {
			if c == u {
				set |= 1 << i
				found = true
				break
			}
		}
		if !found {
			return 0, fmt.Errorf("%q is not a capability of capabilities(7)", n)
		}
	}
	return set, nil
}

// CapabilityNames lists the names of the capabilities in set, in bit
// order; a bit past the last known capability is named by its number.
func CapabilityNames(set uint64) []string {
	var out []string
	for set != 0 {
		i := bits.TrailingZeros64(set)
		set &^= 1 << i
		if i < len(capNames) {
			out = append(out, capNames[i])
		} else {
			out = append(out, fmt.Sprintf("CAP_%d", i))
		}
	}
	return out
}
