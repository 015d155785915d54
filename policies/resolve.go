package policies

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/moat-sandbox/moat/nsexec/hostpath"
	"golang.org/x/sys/unix"
)

// MaxExtendsDepth bounds an extends chain (the policy itself not counted).
const MaxExtendsDepth = 8

// Resolve follows p's extends chain and returns the effective policy: bases
// merged under p, defaults filled in, Extends cleared, then validated. A base
// is a built-in name, or else a file path, relative to the current directory
// (Load resolves it relative to the extending file instead). p is not
// modified.
//
// Merging, base first and each extending policy over it:
//   - name is the extending policy's; description, rootfs, network, identity
//     and version are the extending policy's when set, else the base's;
//   - limits merge field by field (a set field wins); limits.required is the
//     union, so a base's requirement cannot be dropped; requires.mode is the
//     stronger of the two (ModeNames), so neither can a base's mode;
//   - mounts merge by destination (same destination: the extending one
//     replaces it; others are appended); rlimits merge by type likewise;
//   - env is the union of the names, in order;
//   - egress is replaced as a whole when the extending policy sets one, so
//     an allowlist never grows by inheritance the reader does not see;
//   - seccomp is replaced as a whole when the extending policy sets one:
//     filter rules are ordered and prioritised, so profiles are not mixed;
//     "unfiltered": true drops the base's profile, and a profile set over
//     an unfiltered base makes the result filtered again.
//
// A field cannot be unset by an extending policy (there is no "null means
// remove"); write a policy without extends for that.
//
// Defaults after merging: version 1, rootfs "host", network "none",
// identity 1000/1000. Limits and seccomp have no defaults: a policy that
// ends up with no seccomp profile (or one that refuses nothing) is invalid
// unless it states "unfiltered": true (CheckFilter).
func Resolve(p *Policy) (*Policy, error) {
	return resolve(clone(p), p.Name, "", nil)
}

// resolve resolves p (which it owns and may reuse), known as key in the chain of policies followed so far
// (a built-in name or an absolute file path), with relative extends paths
// taken from dir.
func resolve(p *Policy, key, dir string, chain []string) (*Policy, error) {
	if p.Extends == "" {
		out := merge(&Policy{}, p)
		out.fillDefaults()
		if err := out.Validate(); err != nil {
			return nil, err
		}
		return out, nil
	}
	baseKey, base, baseDir, err := loadBase(p.Extends, dir)
	if err != nil {
		return nil, fmt.Errorf("resolve policy %q: extends: %w", key, err)
	}
	// Keys, not names, make the chain, so that a cycle through files is
	// found whatever the files call themselves.
	chain = append(chain, key)
	if slices.Contains(chain, baseKey) {
		return nil, fmt.Errorf("resolve policy %q: %w", chain[0], &ExtendsError{Chain: append(chain, baseKey), Reason: "is a cycle"})
	}
	if len(chain) > MaxExtendsDepth {
		return nil, fmt.Errorf("resolve policy %q: %w", chain[0], &ExtendsError{Chain: append(chain, baseKey), Reason: fmt.Sprintf("is deeper than %d", MaxExtendsDepth)})
	}
	resolvedBase, err := resolve(base, baseKey, baseDir, chain)
	if err != nil {
		return nil, err
	}
	out := merge(resolvedBase, p)
	out.fillDefaults()
	if err := out.Validate(); err != nil {
		return nil, err
	}
	return out, nil
}

// loadBase reads the policy named by extends: a built-in name, else a file
// relative to dir. key identifies it for cycle detection.
func loadBase(name, dir string) (key string, p *Policy, baseDir string, err error) {
	if isBuiltinName(name) {
		p, err := parseBuiltin(name)
		return name, p, "", err
	}
	path := name
	if !filepath.IsAbs(path) && dir != "" {
		path = filepath.Join(dir, path)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", nil, "", err
	}
	p, real, err := parseFile(abs)
	if err != nil {
		return "", nil, "", err
	}
	return real, p, filepath.Dir(real), nil
}

// parseFile reads the policy file at path and returns it with the path it
// resolved to. The path is resolved by the rule of nsexec/hostpath: a
// symlink on the way is followed only if root or the caller could have
// planted it, so another user's link cannot hand root a policy of theirs
// (binds, no filter) or a file only root may read; a refused link is a
// *hostpath.LinkError. Anything but a regular file is refused without
// blocking (a FIFO planted there would wait for a writer).
func parseFile(path string) (*Policy, string, error) {
	fd, real, err := hostpath.Open(path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	var le *hostpath.LinkError
	if errors.As(err, &le) {
		return nil, "", fmt.Errorf("policy %s: %w", path, err)
	}
	if err != nil {
		return nil, "", &NotFoundError{Name: path, Builtins: Builtins(), Err: err}
	}
	f := os.NewFile(uintptr(fd), real)
	defer f.Close()
	if fi, err := f.Stat(); err != nil {
		return nil, "", fmt.Errorf("policy %s: %w", path, err)
	} else if !fi.Mode().IsRegular() {
		return nil, "", fmt.Errorf("policy %s: a %v, not a regular file", path, fi.Mode().Type())
	}
	p, err := Parse(f)
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", path, err)
	}
	return p, real, nil
}

func (p *Policy) fillDefaults() {
	p.Extends = ""
	if p.Version == 0 {
		p.Version = Version
	}
	if p.Rootfs == "" {
		p.Rootfs = RootfsHost
	}
	if p.Network == "" {
		p.Network = NetworkNone
	}
	if p.Identity == nil {
		p.Identity = &Identity{UID: DefaultUID, GID: DefaultGID}
	}
}

// merge returns child over base, following Resolve's rules. It owns both
// (private copies: a fresh parse, a resolved base, or Resolve's clone), so
// the result reuses their slices and pointers instead of copying them.
func merge(base, child *Policy) *Policy {
	c, out := child, base
	out.Name = c.Name
	out.Extends = c.Extends
	setIf(&out.Version, c.Version)
	setIf(&out.Description, c.Description)
	setIf(&out.Rootfs, c.Rootfs)
	setIf(&out.Network, c.Network)
	if c.Identity != nil {
		out.Identity = c.Identity
	}
	if c.Egress != nil {
		out.Egress = c.Egress
	}
	l, cl := &out.Limits, c.Limits
	setIf(&l.Timeout, cl.Timeout)
	setIf(&l.OutputCap, cl.OutputCap)
	setIf(&l.TmpfsSize, cl.TmpfsSize)
	setIf(&l.Memory, cl.Memory)
	setIf(&l.Pids, cl.Pids)
	setIf(&l.CPUs, cl.CPUs)
	l.Required = union(l.Required, cl.Required)
	// A policy may ask more of its base's host, never less: the stronger
	// of the two modes holds.
	if c.Requires != nil && c.Requires.Mode != "" {
		if out.Requires == nil || out.Requires.Mode == "" || ModeRank(c.Requires.Mode) < ModeRank(out.Requires.Mode) {
			out.Requires = &Requires{Mode: c.Requires.Mode}
		}
	}
	for _, m := range c.Mounts {
		i := slices.IndexFunc(out.Mounts, func(b mount) bool { return b.Destination == m.Destination })
		if i >= 0 {
			out.Mounts[i] = m
		} else {
			out.Mounts = append(out.Mounts, m)
		}
	}
	for _, r := range c.Rlimits {
		i := slices.IndexFunc(out.Rlimits, func(b rlimit) bool { return b.Type == r.Type })
		if i >= 0 {
			out.Rlimits[i] = r
		} else {
			out.Rlimits = append(out.Rlimits, r)
		}
	}
	out.Env = union(out.Env, c.Env)
	if c.Seccomp != nil {
		out.Seccomp, out.Unfiltered = c.Seccomp, false
	}
	if c.Unfiltered {
		out.Seccomp, out.Unfiltered = nil, true
	}
	return out
}

func setIf[T comparable](dst *T, v T) {
	var zero T
	if v != zero {
		*dst = v
	}
}

func union(a, b []string) []string {
	out := slices.Clone(a)
	for _, s := range b {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}
