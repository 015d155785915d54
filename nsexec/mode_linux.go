package nsexec

import (
	"bufio"
	"bytes"
	"os"
	"strings"
	"sync"
)

// HostMode is the strongest mode this host allows a sandbox, decided once
// per process, and when it is not full, why.
//
// The probe reads /proc/self/mountinfo, as the kernel decides whether a
// sandbox may mount a procfs (fs/namespace.c mount_too_revealing and
// mnt_already_visible): a user namespace gets a new procfs only if some
// procfs of its mount namespace is fully visible, mounted at its own
// root, with no locked mount flag the new one lacks and no mount on it but
// over a permanently empty directory. The sandbox's mount namespace is a
// copy of ours made by a new user namespace, so every flag and child
// mount there is locked (CL_UNPRIVILEGED): a container's masks over
// /proc/kcore, /proc/acpi and the like (runc's maskedPaths) make every
// procfs of it too revealing.
//
// Below both: where no user namespace can be made at all (UserNSRefused),
// the host allows ModeNoUserNS, whose sandboxes run only on a kernel with
// the Landlock it needs (CheckNoUserNS).
func HostMode() (Mode, string) { return hostMode() }

var hostMode = sync.OnceValues(func() (Mode, string) {
	if refused, why := UserNSRefused(); refused {
		return ModeNoUserNS, why
	}
	return procMode()
})

// ProcMode is HostMode where a user namespace can be made: the rung the
// mountinfo allows (full or no-proc), read once per process, with no
// user namespace made. A caller that starts from it learns of a refused
// user namespace from its first clone (UserNSVerdict).
func ProcMode() (Mode, string) { return procMode() }

var procMode = sync.OnceValues(func() (Mode, string) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		// No mountinfo: no procfs at all, which no sandbox can mount either.
		return ModeNoProc, "no /proc/self/mountinfo (" + err.Error() + "): this process sees no procfs"
	}
	return modeOf(b)
})

// procEmptyDirs are the permanently empty directories of a procfs, the
// only mount points mnt_already_visible lets a locked mount cover
// (register_sysctl_mount_point).
var procEmptyDirs = []string{"sys/fs/binfmt_misc"}

// mountEntry is one line of mountinfo (proc(5)): the fields the probe needs.
type mountEntry struct {
	id, parent string
	root, at   string
	opts       []string
	fstype     string
}

// modeOf decides the mode from a mountinfo's text.
func modeOf(mountinfo []byte) (Mode, string) {
	var all []mountEntry
	sc := bufio.NewScanner(bytes.NewReader(mountinfo))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		sep := -1
		for i := 6; i < len(f); i++ {
			if f[i] == "-" {
				sep = i
				break
			}
		}
		if sep < 0 || sep+1 >= len(f) {
			continue
		}
		all = append(all, mountEntry{id: f[0], parent: f[1], root: f[3], at: unescapeMountinfo(f[4]),
			opts: strings.Split(f[5], ","), fstype: f[sep+1]})
	}
	reason := "no procfs is mounted here"
	for _, p := range all {
		if p.fstype != "proc" || p.root != "/" {
			continue
		}
		if r := tooRevealing(p, all); r != "" {
			reason = r
			continue
		}
		return ModeFull, ""
	}
	return ModeNoProc, "the kernel refuses the sandbox a new procfs (fs/namespace.c mount_too_revealing): " + reason
}

// tooRevealing says why a new procfs would reveal more than procfs p
// does, or "" when it would not.
func tooRevealing(p mountEntry, all []mountEntry) string {
	has := func(o string) bool {
		for _, x := range p.opts {
			if x == o {
				return true
			}
		}
		return false
	}
	// The sandbox's procfs is read-write and relatime (attrProc): a
	// locked ro, noatime or strictatime one may not be loosened.
	if has("ro") || has("noatime") || has("nodiratime") || !has("relatime") {
		return "the procfs at " + p.at + " is mounted " + strings.Join(p.opts, ",") + ", stricter than a sandbox's"
	}
	for _, c := range all {
		if c.parent != p.id || c.id == p.id {
			continue
		}
		rel := strings.TrimPrefix(strings.TrimPrefix(c.at, p.at), "/")
		empty := false
		for _, e := range procEmptyDirs {
			empty = empty || rel == e
		}
		if !empty {
			return "the procfs at " + p.at + " has " + c.at + " covered (a container's masked /proc)"
		}
	}
	return ""
}

// unescapeMountinfo undoes mountinfo's octal escapes (\040 for a space).
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && isOctal(s[i+1]) && isOctal(s[i+2]) && isOctal(s[i+3]) {
			b.WriteByte((s[i+1]-'0')<<6 | (s[i+2]-'0')<<3 | (s[i+3] - '0'))
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isOctal(c byte) bool { return c >= '0' && c <= '7' }
