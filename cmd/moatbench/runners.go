package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/moat-sandbox/moat/policies"
	"github.com/moat-sandbox/moat/seccomp"
)

// runner starts a tool one way.
type runner struct {
	name string
	// argv returns the command line that runs tool; id is unique per run.
	argv func(tool []string, id int) []string
	// files, when set, opens the descriptors passed as 3, 4, ... of one run.
	files func() ([]*os.File, error)
	// thread, when set, prepares the locked OS thread the runs are started
	// from (onThread).
	thread func() error
}

type skip struct{ name, reason string }

type benchEnv struct {
	runners []runner
	skipped []skip
}

// prepare finds what is installed and builds every runner's artifacts
// (the seccomp BPF for bwrap, the OCI bundles for runc) under cfg.work.
func prepare(cfg *config) (*benchEnv, error) {
	env := &benchEnv{}
	env.runners = append(env.runners,
		runner{name: "plain exec", argv: func(t []string, _ int) []string { return t }},
		runner{name: "moat run", argv: func(t []string, _ int) []string {
			return append([]string{cfg.moat, "run", "--"}, t...)
		}},
	)
	if bwrap, err := exec.LookPath("bwrap"); err != nil {
		env.skipped = append(env.skipped, skip{"bwrap", "not installed"})
	} else {
		base := bwrapArgs(bwrap)
		env.runners = append(env.runners, runner{name: "bwrap", argv: func(t []string, _ int) []string {
			return append(append(append([]string(nil), base...), "--"), t...)
		}})
		bpf, err := defaultBPF(cfg.work)
		if err != nil {
			env.skipped = append(env.skipped, skip{"bwrap+seccomp", err.Error()})
		} else {
			env.runners = append(env.runners, runner{name: "bwrap+seccomp",
				argv: func(t []string, _ int) []string {
					return append(append(append([]string(nil), base...), "--seccomp", "3", "--"), t...)
				},
				files: func() ([]*os.File, error) {
					f, err := os.Open(bpf)
					return []*os.File{f}, err
				}})
		}
	}
	for _, rt := range []string{"crun", "runc"} {
		bin, err := exec.LookPath(rt)
		if err != nil {
			env.skipped = append(env.skipped, skip{rt, "not installed"})
			continue
		}
		thread, why := runtimeThread(rt)
		if why != "" {
			env.skipped = append(env.skipped, skip{rt, why})
			continue
		}
		for _, withSeccomp := range []bool{false, true} {
			name := rt
			if withSeccomp {
				name += "+seccomp"
			}
			r, err := ociRunner(bin, cfg, name, withSeccomp, thread)
			if err != nil {
				env.skipped = append(env.skipped, skip{name, err.Error()})
				continue
			}
			env.runners = append(env.runners, r)
		}
	}
	return env, nil
}

// bwrapArgs is moat's host mode in bwrap terms: every namespace, the host
// system directories read-only (merged-/usr links as links), the loader
// cache, fresh /proc, /dev and /tmp, /work as the cwd, uid 1000.
func bwrapArgs(bwrap string) []string {
	a := []string{bwrap, "--unshare-all", "--unshare-user", "--uid", "1000", "--gid", "1000",
		"--die-with-parent", "--new-session", "--cap-drop", "ALL"}
	for _, d := range []string{"usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32"} {
		fi, err := os.Lstat("/" + d)
		switch {
		case err != nil:
		case fi.Mode()&os.ModeSymlink != 0:
			target, _ := os.Readlink("/" + d)
			a = append(a, "--symlink", target, "/"+d)
		default:
			a = append(a, "--ro-bind", "/"+d, "/"+d)
		}
	}
	return append(a, "--ro-bind", "/etc/ld.so.cache", "/etc/ld.so.cache",
		"--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--dir", "/work", "--chdir", "/work")
}

// defaultBPF compiles the default policy's profile with moat's seccomp
// package and writes the BPF program bwrap --seccomp reads.
func defaultBPF(dir string) (string, error) {
	pol, err := policies.Builtin("default")
	if err != nil {
		return "", err
	}
	if pol.Seccomp == nil {
		return "", fmt.Errorf("the default policy has no seccomp profile")
	}
	prog, err := seccomp.Compile(pol.Seccomp)
	if err != nil {
		return "", fmt.Errorf("compile the default profile: %w", err)
	}
	b, err := prog.MarshalBinary()
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "default.bpf")
	return path, os.WriteFile(path, b, 0o644)
}

func hostLine() string {
	b, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	return fmt.Sprintf("kernel %s, %d CPUs, %s", strings.TrimSpace(string(b)), runtime.NumCPU(), runtime.Version())
}
