package nsexec

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"

	"golang.org/x/sys/unix"
)

// WireError is a config or request frame the sandbox child refuses before
// acting on it: Field is the JSON path of what is wrong ("config.args",
// "sources.mounts"), Errno what the child reports (EINVAL for a value,
// EPROTO for a frame that does not fit this build's protocol). The parent
// builds frames that pass (normalize); a frame that does not comes from a
// parent of another build or from a bug, and is refused with its field
// named instead of failing, or panicking, halfway through the setup.
type WireError struct {
	Field  string
	Reason string
	Errno  unix.Errno
}

func (e *WireError) Error() string { return "sandbox frame: " + e.Field + ": " + e.Reason }

func (e *WireError) Unwrap() error { return e.Errno }

// maxTasks bounds wire.Tasks: one descriptor per cgroup v1 hierarchy, of
// which Linux has fewer than twenty.
const maxTasks = 64

// maxHostname is the kernel's limit for sethostname(2) (__NEW_UTS_LEN).
const maxHostname = 64

// decodeFrame decodes and checks a config frame's body.
func decodeFrame(body []byte) (*wire, error) {
	var w wire
	if err := json.Unmarshal(body, &w); err != nil {
		return nil, &WireError{Field: jsonField(err, "(config frame)"), Reason: "does not decode: " + err.Error(), Errno: unix.EINVAL}
	}
	if err := w.check(); err != nil {
		return nil, err
	}
	return &w, nil
}

// check refuses what the child would otherwise index, loop over or write
// into the sandbox unchecked.
func (w *wire) check() error {
	bad := func(field string, errno unix.Errno, format string, args ...any) error {
		return &WireError{Field: field, Reason: fmt.Sprintf(format, args...), Errno: errno}
	}
	c := w.Config
	switch {
	case c == nil:
		return bad("config", unix.EPROTO, "is missing")
	case c.Version != ConfigVersion:
		return bad("config.version", unix.EPROTO, "is %d, want %d (moat and its init are of different builds)", c.Version, ConfigVersion)
	case !w.Deferred && (len(c.Args) == 0 || c.Args[0] == ""):
		return bad("config.args", unix.EINVAL, "names no tool")
	case c.Network != "" && c.Network != NetworkNone && c.Network != NetworkLoopback:
		return bad("config.network", unix.EINVAL, "%q is neither %q nor %q", c.Network, NetworkNone, NetworkLoopback)
	case c.UID == math.MaxUint32 || c.GID == math.MaxUint32:
		return bad("config.uid", unix.EINVAL, "uid or gid 4294967295 is the invalid id (-1), which setresuid(2) reads as \"unchanged\"")
	case len(c.Groups) > maxGroups:
		return bad("config.groups", unix.EINVAL, "has %d groups; the kernel takes at most %d", len(c.Groups), maxGroups)
	case c.Umask != nil && *c.Umask > 0o777:
		return bad("config.umask", unix.EINVAL, "%#o is not a mode mask (0 to 0777)", *c.Umask)
	case c.TmpSize < 0:
		return bad("config.tmpSize", unix.EINVAL, "is negative")
	case w.Tasks < 0 || w.Tasks > maxTasks:
		return bad("tasks", unix.EPROTO, "%d is not 0 to %d", w.Tasks, maxTasks)
	case w.Check && (!w.Deferred || len(c.Args) != 1 || c.Args[0] == ""):
		return bad("check", unix.EPROTO, "is for a prepared sandbox, with the one name to resolve in config.args")
	case c.EgressTCP != 0 && !c.NoUserNS:
		return bad("config.egressTCP", unix.EPROTO, "is the no-userns rung's egress, and the config is not in it")
	case w.Tail && (!w.Deferred || c.Egress != nil):
		return bad("tail", unix.EPROTO, "is for a prepared sandbox without an egress forwarder only")
	case (c.Rootfs != "") != (w.Sources.Rootfs != nil):
		return bad("sources.rootfs", unix.EPROTO, "does not match config.rootfs")
	case (c.Workdir != "") != (w.Sources.Workdir != nil):
		return bad("sources.workdir", unix.EPROTO, "does not match config.workdir")
	case len(w.Sources.Mounts) != len(c.Mounts):
		return bad("sources.mounts", unix.EPROTO, "has %d inodes for %d mounts", len(w.Sources.Mounts), len(c.Mounts))
	}
	if reason := HostnameProblem(c.Hostname); reason != "" {
		return bad("config.hostname", unix.EINVAL, "%s", reason)
	}
	if c.RootfsWritable && c.Rootfs == "" {
		return bad("config.rootfsWritable", unix.EINVAL, "without a rootfs")
	}
	var ce *ConfigError
	if err := checkSysctls(c.Sysctl); errors.As(err, &ce) {
		return bad("config."+ce.Field, unix.EINVAL, "%s", ce.Reason)
	}
	if err := checkPaths(c); errors.As(err, &ce) {
		return bad("config."+ce.Field, unix.EINVAL, "%s", ce.Reason)
	}
	if err := checkRootfsPropagation(c.RootfsPropagation); errors.As(err, &ce) {
		return bad("config."+ce.Field, unix.EINVAL, "%s", ce.Reason)
	}
	if err := CheckDevices(c.Devices); errors.As(err, &ce) {
		return bad("config."+ce.Field, unix.EINVAL, "%s", ce.Reason)
	}
	return nil
}

// HostnameProblem says what is wrong with a sandbox hostname, or "": more
// than the kernel's 64 bytes, or white space or a control character. The
// name goes into the sandbox's /etc/hosts and /etc/hostname, one line each,
// so a line break in it would add lines of its own.
func HostnameProblem(h string) string {
	if len(h) > maxHostname {
		return fmt.Sprintf("is %d bytes; the kernel allows %d", len(h), maxHostname)
	}
	if strings.ContainsFunc(h, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return fmt.Sprintf("%q holds white space or a control character", h)
	}
	return ""
}

// decodeRequest decodes and checks a deferred child's request body.
func decodeRequest(body []byte) (*request, error) {
	bad := func(reason string) error {
		return &WireError{Field: "(request frame)", Reason: reason, Errno: unix.EINVAL}
	}
	if len(body) < 8 {
		return nil, bad("is shorter than its two counts")
	}
	argc, envc := uint64(binary.BigEndian.Uint32(body)), uint64(binary.BigEndian.Uint32(body[4:]))
	if argc == 0 {
		return nil, &WireError{Field: "args", Reason: "names no tool", Errno: unix.EINVAL}
	}
	// Every string takes at least its NUL, so counts beyond the bytes left
	// are refused before anything is allocated for them.
	if argc+envc > uint64(len(body)-8) {
		return nil, bad("counts more strings than it has bytes")
	}
	rest := body[8:]
	strs := make([]string, 0, argc+envc)
	for range argc + envc {
		i := bytes.IndexByte(rest, 0)
		if i < 0 {
			return nil, bad("ends inside a string")
		}
		strs = append(strs, string(rest[:i]))
		rest = rest[i+1:]
	}
	if len(rest) != 0 {
		return nil, bad("has bytes after its last string")
	}
	r := &request{Args: strs[:argc:argc], Env: strs[argc:]}
	if r.Args[0] == "" {
		return nil, &WireError{Field: "args", Reason: "names no tool", Errno: unix.EINVAL}
	}
	return r, nil
}

// jsonField is the path encoding/json names in a type error, else whole.
func jsonField(err error, whole string) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field != "" {
		return te.Field
	}
	return whole
}
