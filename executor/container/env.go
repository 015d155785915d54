package container

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/moat-sandbox/moat/executor"
	"golang.org/x/sys/unix"
)

// envNames is the -e list (contract 6.3): the three RULVAR_* names first,
// then every other name of the tool environment in its order, which the
// pipeline built as the forwarded host variables that are set, then the
// minted credentials; de-duplicated.
func envNames(toolEnv []string) []string {
	names := []string{executor.EnvTool, executor.EnvRunID, executor.EnvIdempotencyKey}
	seen := map[string]bool{}
	for _, n := range names {
		seen[n] = true
	}
	for _, kv := range toolEnv {
		n, _, _ := strings.Cut(kv, "=")
		if !seen[n] {
			seen[n] = true
			names = append(names, n)
		}
	}
	return names
}

// cliEnv is the CLI process's environment (contract 6.3): the daemonEnv
// host variables that are set, then the tool environment (forwarded,
// minted, RULVAR_*), later values winning. Nothing else of the host.
func (s *settings) cliEnv(toolEnv []string) []string {
	var order []string
	vals := map[string]string{}
	set := func(k, v string) {
		if _, ok := vals[k]; !ok {
			order = append(order, k)
		}
		vals[k] = v
	}
	for _, n := range s.daemonEnv {
		if v, ok := s.cfg.LookupEnv(n); ok {
			set(n, v)
		}
	}
	for _, kv := range toolEnv {
		k, v, _ := strings.Cut(kv, "=")
		set(k, v)
	}
	env := make([]string, 0, len(order))
	for _, k := range order {
		env = append(env, k+"="+vals[k])
	}
	return env
}

// defaultPath is searched for a bare CLI name when the CLI environment has
// no PATH: glibc's _PATH_DEFPATH, which the reference's spawn (libuv) falls
// back to.
const defaultPath = "/usr/bin:/bin"

// lookCLI resolves the CLI against the PATH of its own environment (never
// this process's), as execvp would in the child.
func lookCLI(cli string, env []string) (string, error) {
	if strings.Contains(cli, "/") {
		return filepath.Abs(cli) // the CLI runs in the workdir: never relative to it
	}
	path := defaultPath
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	for _, dir := range filepath.SplitList(path) {
		if !filepath.IsAbs(dir) {
			continue // never resolve against the cwd
		}
		p := filepath.Join(dir, cli)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("exec %q: not found in PATH %q: %w", cli, path, unix.ENOENT)
}
