package policies

import (
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// Validate checks every field that is set and returns all problems at once
// (errors.Join of *FieldError), or nil. Unset fields are fine: a policy that
// extends another may leave them to its base, and Resolve fills defaults.
func (p *Policy) Validate() error {
	var v validator
	if p.Version != 0 && p.Version != Version {
		v.add("version", p.Version, "is not supported; use %d", Version)
	}
	if p.Name != "" && !isName(p.Name) {
		v.add("name", p.Name, "is not a valid name; use letters, digits, '.', '_' and '-', starting with a letter or digit")
	}
	if p.Rootfs != "" && p.Rootfs != RootfsHost && !isAbsClean(p.Rootfs) {
		v.add("rootfs", p.Rootfs, "is not allowed; use %q or an absolute, clean directory path", RootfsHost)
	}
	if p.Network != "" && p.Network != NetworkNone && p.Network != NetworkLoopback {
		v.add("network", p.Network, "is not a network mode; use %q or %q", NetworkNone, NetworkLoopback)
	}
	if p.Identity != nil {
		if p.Identity.UID == maxID {
			v.add("identity.uid", p.Identity.UID, "is the invalid id (-1); use 0 to %d", maxID-1)
		}
		if p.Identity.GID == maxID {
			v.add("identity.gid", p.Identity.GID, "is the invalid id (-1); use 0 to %d", maxID-1)
		}
	}
	if p.Egress != nil {
		v.egress(p.Egress)
	}
	v.mounts(p.Mounts)
	v.limits(&p.Limits, p.Extends != "")
	v.rlimits(p)
	if p.Requires != nil && p.Requires.Mode != "" && ModeRank(p.Requires.Mode) < 0 {
		v.add("requires.mode", p.Requires.Mode, "is not a mode; use one of %s", strings.Join(ModeNames, ", "))
	}
	for i, name := range p.Env {
		if !isEnvName(name) {
			v.add(fmt.Sprintf("env[%d]", i), name, "is not an environment variable name; use letters, digits and '_', not starting with a digit")
		}
	}
	if p.Seccomp != nil {
		v.seccomp(p.Seccomp)
	}
	if p.Unfiltered && p.Seccomp != nil {
		v.add("unfiltered", true, "contradicts the seccomp profile of the same policy; remove one of them")
	} else if p.Extends == "" {
		if err := p.CheckFilter(); err != nil {
			v.errs = append(v.errs, err)
		}
	}
	return v.err()
}

const maxID = ^uint32(0)

// The name, environment-name and mode rules are byte classes checked by
// hand: compiling them as regexps cost every moat start 0.2 ms of package
// init. validate_internal_test.go holds the regexps they must agree with.

// isName: ^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$
func isName(s string) bool {
	if s == "" || len(s) > 64 || !isAlnum(s[0]) {
		return false
	}
	for i := 1; i < len(s); i++ {
		if c := s[i]; !isAlnum(c) && c != '.' && c != '_' && c != '-' {
			return false
		}
	}
	return true
}

// isEnvName: ^[A-Za-z_][A-Za-z0-9_]*$
func isEnvName(s string) bool {
	if s == "" || isDigit(s[0]) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !isAlnum(c) && c != '_' {
			return false
		}
	}
	return true
}

// isMode: ^[0-7]{3,4}$
func isMode(s string) bool {
	if len(s) < 3 || len(s) > 4 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '7' {
			return false
		}
	}
	return true
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }
func isAlnum(c byte) bool { return isDigit(c) || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }

type validator struct{ errs []error }

func (v *validator) add(path string, value any, format string, args ...any) {
	v.errs = append(v.errs, fieldErr(path, value, format, args...))
}

func (v *validator) missing(path, reason string) {
	v.errs = append(v.errs, &FieldError{Path: path, Reason: reason})
}

func (v *validator) err() error {
	if len(v.errs) == 0 {
		return nil
	}
	return fmt.Errorf("invalid policy: %w", errors.Join(v.errs...))
}

func isAbsClean(p string) bool {
	return strings.HasPrefix(p, "/") && path.Clean(p) == p
}

// mountOptions are the options a policy mount may carry, each built as it
// says (nsexec.parseMount): nosuid and nodev are always applied, private
// and rprivate are true of every mount in a sandbox, noexec is added, ro
// and rw choose, bind and rbind (binds only) choose this mount alone or
// its whole tree. Options with a value (size=, mode=, nr_inodes=) are
// checked by prefix, for tmpfs only. slave and rslave are refused: no
// mount in a sandbox receives the host's mount events.
var mountOptions = []string{"ro", "rw", "bind", "rbind", "nosuid", "nodev", "noexec",
	"private", "rprivate"}

func (v *validator) mounts(ms []specs.Mount) {
	seen := map[string]bool{}
	for i, m := range ms {
		at := fmt.Sprintf("mounts[%d]", i)
		switch {
		case m.Destination == "":
			v.missing(at+".destination", "is required; use an absolute path inside the sandbox")
		case !isAbsClean(m.Destination) || m.Destination == "/":
			v.add(at+".destination", m.Destination, "is not allowed; use an absolute, clean path other than /")
		case seen[m.Destination]:
			v.add(at+".destination", m.Destination, "is mounted twice; one mount per destination")
		}
		seen[m.Destination] = true
		tmpfs := m.Type == "tmpfs"
		switch m.Type {
		case "", "bind":
			if m.Source == "" {
				v.missing(at+".source", "is required for a bind mount; use an absolute host path")
			} else if !isAbsClean(m.Source) {
				v.add(at+".source", m.Source, "is not allowed; use an absolute, clean host path")
			}
		case "tmpfs":
			if m.Source != "" && m.Source != "tmpfs" {
				v.add(at+".source", m.Source, "is not allowed for tmpfs; leave it empty")
			}
		default:
			v.add(at+".type", m.Type, "is not a mount type; use \"bind\" or \"tmpfs\"")
		}
		keys := map[string]bool{}
		for j, o := range m.Options {
			field := fmt.Sprintf("%s.options[%d]", at, j)
			key, _, _ := strings.Cut(o, "=")
			switch {
			case keys[key]:
				v.add(field, o, "is given twice; give each option once")
			case tmpfs && (o == "bind" || o == "rbind"):
				v.add(field, o, "is a bind option; a tmpfs is a new file system, not a bind")
			case slices.Contains(mountOptions, o):
			case tmpfs && tmpfsOption(o):
			case tmpfs && strings.Contains(o, "="):
				v.add(field, o, "is not a tmpfs option; use size= or nr_inodes= with a positive size (0 would mean unlimited), or mode= with 3 or 4 octal digits")
			default:
				v.add(field, o, "is not a mount option; use one of %s (and size=, mode=, nr_inodes= for tmpfs)", strings.Join(mountOptions, ", "))
			}
			keys[key] = true
		}
		for _, pair := range [][2]string{{"ro", "rw"}, {"bind", "rbind"}} {
			if keys[pair[0]] && keys[pair[1]] {
				v.add(at+".options", strings.Join(m.Options, ","), "has both %s and %s; use one", pair[0], pair[1])
			}
		}
		if len(m.UIDMappings) > 0 || len(m.GIDMappings) > 0 {
			v.missing(at+".uidMappings", "id-mapped mounts are not supported; remove uidMappings and gidMappings")
		}
	}
}

// tmpfsOption reports a valid size=, nr_inodes= or mode= option. A zero
// size or inode count is refused: tmpfs reads 0 as unlimited.
func tmpfsOption(o string) bool {
	key, val, ok := strings.Cut(o, "=")
	if !ok || val == "" {
		return false
	}
	switch key {
	case "size", "nr_inodes":
		n, err := Size(val).Bytes()
		return err == nil && n > 0
	case "mode":
		return isMode(val)
	}
	return false
}

// The CPU limit's range: the quota is CPUs times a 100 ms period, and the
// kernel refuses a quota under 1 ms (EINVAL, kernel/sched/core.c
// min_cfs_quota_period); above NR_CPUS' largest value (8192) a limit
// limits nothing, and past it the quota would overflow into nonsense.
const (
	MinCPUs = 0.01
	MaxCPUs = 8192
)

func (v *validator) limits(l *Limits, hasBase bool) {
	if d, err := l.Timeout.Duration(); err != nil {
		v.add("limits.timeout", string(l.Timeout), "is not a duration; use a number with a unit, like 30s, 1m30s or 500ms")
	} else if d < 0 {
		v.add("limits.timeout", string(l.Timeout), "is negative; use a positive duration")
	}
	sizes := []struct {
		name string
		s    Size
	}{{"outputCap", l.OutputCap}, {"tmpfsSize", l.TmpfsSize}, {"memory", l.Memory}}
	for _, s := range sizes {
		n, err := s.s.Bytes()
		switch {
		case err != nil:
			v.add("limits."+s.name, string(s.s), "is not a size; use bytes or a suffix like 256M")
		case s.s != "" && n == 0:
			v.add("limits."+s.name, string(s.s), "is zero; use a positive size or leave it out")
		}
	}
	if l.Pids < 0 {
		v.add("limits.pids", l.Pids, "is negative; use 1 or more")
	}
	if l.CPUs != 0 && !(l.CPUs >= MinCPUs && l.CPUs <= MaxCPUs) { // NaN fails both
		v.add("limits.cpus", l.CPUs, "is not allowed; use a number of CPUs from %v to %v, like 0.5 or 2", MinCPUs, MaxCPUs)
	}
	set := map[string]bool{
		"timeout": l.Timeout != "", "outputCap": l.OutputCap != "", "tmpfsSize": l.TmpfsSize != "",
		"memory": l.Memory != "", "pids": l.Pids != 0, "cpus": l.CPUs != 0,
	}
	for i, r := range l.Required {
		at := fmt.Sprintf("limits.required[%d]", i)
		isSet, known := set[r]
		switch {
		case !known:
			v.add(at, r, "is not a limit; use one of %s", strings.Join(LimitNames, ", "))
		case !isSet && !hasBase: // a base may set it; checked again once resolved
			v.add(at, r, "is required but limits.%s is not set; set it (here or in the base policy)", r)
		}
	}
}

// rlimitTypes are the RLIMIT_* names of setrlimit(2).
var rlimitTypes = []string{"RLIMIT_AS", "RLIMIT_CORE", "RLIMIT_CPU", "RLIMIT_DATA",
	"RLIMIT_FSIZE", "RLIMIT_LOCKS", "RLIMIT_MEMLOCK", "RLIMIT_MSGQUEUE", "RLIMIT_NICE",
	"RLIMIT_NOFILE", "RLIMIT_NPROC", "RLIMIT_RSS", "RLIMIT_RTPRIO", "RLIMIT_RTTIME",
	"RLIMIT_SIGPENDING", "RLIMIT_STACK"}

func (v *validator) rlimits(p *Policy) {
	seen := map[string]bool{}
	for i, r := range p.Rlimits {
		at := fmt.Sprintf("rlimits[%d]", i)
		if !slices.Contains(rlimitTypes, r.Type) {
			v.add(at+".type", r.Type, "is not an rlimit; use one of %s", strings.Join(rlimitTypes, ", "))
		} else if seen[r.Type] {
			v.add(at+".type", r.Type, "is set twice; one entry per type")
		}
		seen[r.Type] = true
		if r.Soft > r.Hard {
			v.add(at+".soft", r.Soft, "is above hard (%d); soft must be at most hard", r.Hard)
		}
	}
}
