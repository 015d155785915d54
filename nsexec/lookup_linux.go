package nsexec

import (
	"slices"
	"strings"
)

// ProcMasking says how the sandbox's /proc covers path (an absolute path
// such as "/proc/kcore"): masked (a /dev/null or an empty read-only tmpfs
// over it, proc_linux.go) or read-only. An OCI runtime checks a config's
// maskedPaths and readonlyPaths against it.
func ProcMasking(path string) (masked, readOnly bool) {
	name, ok := strings.CutPrefix(path, "/proc/")
	if !ok {
		return false, false
	}
	if slices.Contains(procNulled, name) || slices.Contains(procEmptied, name) {
		return true, true
	}
	return false, slices.Contains(procReadOnly, name)
}

// RlimitResource returns the resource number of an OCI rlimit name
// ("RLIMIT_NOFILE"), for a caller that sets the limit on itself first: a
// hard limit above the caller's can only be raised outside the sandbox's
// user namespace (CAP_SYS_RESOURCE of the initial one).
func RlimitResource(name string) (int, bool) {
	r, ok := rlimitResources[name]
	return r, ok
}
