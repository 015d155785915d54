package main

import (
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"time"

	"github.com/moat-sandbox/moat/policies"
)

// check refuses a bad --memory, --pids, --cpus or --timeout (zero: not
// given) with the flag named; the policy's own Validate would name
// limits.memory, which the user did not type, and would let --cpus +Inf
// or a negative --timeout through.
func (l *limitFlags) check(timeout time.Duration) error {
	if *l.memory != "" {
		if n, err := policies.Size(*l.memory).Bytes(); err != nil || n <= 0 {
			return fmt.Errorf("--memory %q: not a positive size; use bytes or a suffix like 256M or 1G", *l.memory)
		}
	}
	if *l.pids < 0 {
		return fmt.Errorf("--pids %d: negative; use 1 or more", *l.pids)
	}
	if c := *l.cpus; c != 0 && (math.IsNaN(c) || c < policies.MinCPUs || c > policies.MaxCPUs) {
		return fmt.Errorf("--cpus %v: use a number of CPUs from %v to %v, like 0.5 or 2", c, policies.MinCPUs, policies.MaxCPUs)
	}
	if timeout < 0 {
		return fmt.Errorf("--timeout %v: negative; use a positive duration like 30s", timeout)
	}
	return nil
}

// parseEnv builds the command's environment: PATH and HOME, or with
// inherit the whole of environ as it is (an executor that launches through
// moat run already replaced it: the reference's subprocess executor gives
// its tools no PATH and no HOME, and moat adds none), then each --env,
// NAME=VALUE or a NAME looked up with lookup; a later value of a name
// replaces an earlier one in place. A --env that names nothing ("=x") or
// holds a NUL byte, which execve(2) cannot pass, is refused naming it.
func parseEnv(envs []string, inherit bool, environ []string, lookup func(string) (string, bool)) ([]string, error) {
	vals := map[string]string{"PATH": defaultPath, "HOME": "/work"}
	order := []string{"PATH", "HOME"}
	if inherit {
		vals, order = map[string]string{}, nil
	}
	set := func(k, v string) {
		if _, ok := vals[k]; !ok {
			order = append(order, k)
		}
		vals[k] = v
	}
	if inherit {
		for _, kv := range environ {
			if k, v, ok := strings.Cut(kv, "="); ok && k != "" {
				set(k, v)
			}
		}
	}
	for _, e := range envs {
		k, v, hasValue := strings.Cut(e, "=")
		switch {
		case k == "":
			return nil, fmt.Errorf("--env %q: no variable name; use NAME=VALUE or NAME", e)
		case strings.IndexByte(e, 0) >= 0:
			return nil, fmt.Errorf("--env %q: holds a NUL byte, which no environment can", e)
		case hasValue:
			set(k, v)
		default:
			if v, ok := lookup(k); ok {
				set(k, v)
			}
		}
	}
	out := make([]string, 0, len(order))
	for _, k := range order {
		out = append(out, k+"="+vals[k])
	}
	return out, nil
}

// bindDestination checks a --bind destination: absolute, clean, not the
// root, no NUL byte (nsexec would refuse the first three later, naming a
// mount index instead of the flag).
func bindDestination(dst string) error {
	if !strings.HasPrefix(dst, "/") || filepath.Clean(dst) != dst || dst == "/" || strings.IndexByte(dst, 0) >= 0 {
		return fmt.Errorf("the destination must be an absolute, clean path inside the sandbox, other than /")
	}
	return nil
}
