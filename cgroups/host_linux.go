package cgroups

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	cg "github.com/containerd/cgroups/v3"
)

// Host is what Detect found: the cgroup layout, the mountpoints and where
// this process sits in each hierarchy.
type Host struct {
	Layout Layout
	// Unified is the cgroup2 mountpoint ("" if none) and UnifiedControllers
	// the controllers its root offers (cgroup.controllers).
	Unified            string
	UnifiedControllers []string
	// V1 maps each v1 controller (memory, pids, cpu, cpuacct, freezer, ...)
	// to the mountpoint of its hierarchy; co-mounted controllers share one.
	V1 map[string]string
	// Self maps each v1 controller to the directory of this process's cgroup
	// in that hierarchy; SelfUnified is the same for cgroup2 ("" if none).
	Self        map[string]string
	SelfUnified string
}

// Detect reads /proc/self/mountinfo and /proc/self/cgroup.
func Detect() (*Host, error) {
	mi, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("detect cgroups: %w", err)
	}
	defer mi.Close()
	cgf, err := os.Open("/proc/self/cgroup")
	if err != nil {
		return nil, fmt.Errorf("detect cgroups: %w", err)
	}
	defer cgf.Close()
	h, err := detectFrom(mi, cgf)
	if err != nil {
		return nil, fmt.Errorf("detect cgroups: %w", err)
	}
	if h.Unified != "" {
		if b, err := os.ReadFile(filepath.Join(h.Unified, "cgroup.controllers")); err == nil {
			h.UnifiedControllers = strings.Fields(string(b))
		}
	}
	return h, nil
}

type cgroupMount struct {
	root, point string // the hierarchy path mounted, and where
	controllers []string
}

// detectFrom builds a Host from the two proc files. The cgroup paths in
// /proc/self/cgroup are relative to the hierarchy root, while a mount may
// show only a subtree of it (a bind mount, or a cgroup namespace): the mount
// root is stripped before joining (proc(5), "/proc/pid/mountinfo").
func detectFrom(mountinfo, cgroupFile io.Reader) (*Host, error) {
	mounts, err := parseMountinfo(mountinfo)
	if err != nil {
		return nil, err
	}
	self, selfUnified, err := cg.ParseCgroupFromReaderUnified(cgroupFile)
	if err != nil {
		return nil, err
	}
	h := &Host{V1: map[string]string{}, Self: map[string]string{}}
	for _, m := range mounts {
		if m.controllers == nil { // cgroup2
			if h.Unified == "" || m.point == "/sys/fs/cgroup" {
				h.Unified = m.point
				h.SelfUnified = under(m, selfUnified)
			}
			continue
		}
		for _, c := range m.controllers {
			if _, dup := h.V1[c]; dup {
				continue // the first mount wins, as in the kernel's own listing order
			}
			h.V1[c] = m.point
			if p, ok := self[c]; ok {
				h.Self[c] = under(m, p)
			}
		}
	}
	switch {
	case len(h.V1) > 0 && h.Unified != "":
		h.Layout = Hybrid
	case len(h.V1) > 0:
		h.Layout = V1
	case h.Unified != "":
		h.Layout = Unified
	}
	return h, nil
}

// under returns the directory of cgroup path p in mount m, or "" when p lies
// outside what m shows.
func under(m cgroupMount, p string) string {
	if p == "" {
		return ""
	}
	rel, ok := strings.CutPrefix(p, m.root)
	if m.root == "/" {
		rel, ok = p, true
	}
	if !ok || (rel != "" && !strings.HasPrefix(rel, "/")) {
		return ""
	}
	return filepath.Join(m.point, rel)
}

// parseMountinfo keeps the cgroup and cgroup2 mounts. controllers is nil for
// cgroup2; named v1 hierarchies (name=systemd) have no controllers and are
// skipped.
func parseMountinfo(r io.Reader) ([]cgroupMount, error) {
	var out []cgroupMount
	s := bufio.NewScanner(r)
	s.Buffer(make([]byte, 64<<10), 1<<20)
	for s.Scan() {
		pre, post, ok := strings.Cut(s.Text(), " - ")
		if !ok {
			continue
		}
		f, g := strings.Fields(pre), strings.Fields(post)
		if len(f) < 5 || len(g) < 3 {
			return nil, fmt.Errorf("parse mountinfo line %q", s.Text())
		}
		m := cgroupMount{root: unescape(f[3]), point: unescape(f[4])}
		switch g[0] {
		case "cgroup2":
			out = append(out, m)
		case "cgroup":
			for _, o := range strings.Split(g[2], ",") {
				if slices.Contains(v1Knobs, o) || strings.HasPrefix(o, "name=") || strings.HasPrefix(o, "release_agent=") {
					continue
				}
				m.controllers = append(m.controllers, o)
			}
			if len(m.controllers) > 0 {
				out = append(out, m)
			}
		}
	}
	return out, s.Err()
}

// v1Knobs are the super options of a v1 cgroup mount that are not
// controller names.
var v1Knobs = []string{"rw", "ro", "noprefix", "xattr", "clone_children", "cpuset_v2_mode", "none", "all"}

// unescape undoes the octal escapes (\040 for a space) of mountinfo fields.
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v byte
			okOct := true
			for _, c := range []byte(s[i+1 : i+4]) {
				if c < '0' || c > '7' {
					okOct = false
					break
				}
				v = v*8 + (c - '0')
			}
			if okOct {
				b.WriteByte(v)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
