package main

import (
	"flag"
	"fmt"
	"io"
	"math"
	"math/big"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/policies"
)

// FuzzBindFlag: --bind SRC:DST[:ro|rw] becomes exactly one bind with an
// absolute source, a clean absolute destination and the mode asked for,
// and writing it back as a spec parses to the same; anything else is
// refused with an error that quotes the flag.
func FuzzBindFlag(f *testing.F) {
	for _, s := range []string{"/opt/models:/opt/models", "./src:/src:rw", "data:/data:ro", "/a:/b:rx",
		"/a:b", "/a:/b/../c", "/a", ":/b", "/a:/", "/a:/b:ro:x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, spec string) {
		got, err := parseBinds([]string{spec})
		if err != nil {
			if !strings.HasPrefix(err.Error(), fmt.Sprintf("--bind %q: ", spec)) {
				t.Fatalf("refused without naming the flag: %v", err)
			}
			return
		}
		if len(got) != 1 {
			t.Fatalf("%d mounts from one --bind", len(got))
		}
		m := got[0]
		mode := "ro"
		if strings.HasSuffix(spec, ":rw") {
			mode = "rw"
		}
		switch {
		case !strings.HasPrefix(m.Source, "/") || strings.ContainsRune(m.Source, 0):
			t.Fatalf("source %q", m.Source)
		case bindDestination(m.Destination) != nil:
			t.Fatalf("destination %q", m.Destination)
		case m.Type != "bind" || !reflect.DeepEqual(m.Options, []string{mode}):
			t.Fatalf("%+v, want a %s bind", m, mode)
		}
		back, err := parseBinds([]string{m.Source + ":" + m.Destination + ":" + mode})
		if err != nil || !reflect.DeepEqual(back, got) {
			t.Fatalf("written back: %+v (%v), want %+v", back, err, got)
		}
	})
}

// FuzzEnvFlag: the environment holds PATH and HOME first, or with
// --inherit-env the host's own variables and nothing added (its environ has
// no HOME here, and none appears), then each name once, each with the last
// value given (--env in order, a bare NAME from the host); a --env without
// a name or with a NUL byte is refused quoting it.
func FuzzEnvFlag(f *testing.F) {
	f.Add("A=1", "B", false)
	f.Add("PATH=/opt/bin", "HOME", true)
	f.Add("=x", "A=1=2", false)
	f.Add("HOST_B", "A=\x00", true)
	environ := []string{"HOST_A=1", "PATH=/host/bin", "=weird", "NOEQ"}
	host := map[string]string{"HOST_A": "1", "HOST_B": "two", "PATH": "/host/bin"}
	lookup := func(k string) (string, bool) { v, ok := host[k]; return v, ok }
	f.Fuzz(func(t *testing.T, a, b string, inherit bool) {
		env, err := parseEnv([]string{a, b}, inherit, environ, lookup)
		bad := func(e string) bool { return e == "" || strings.HasPrefix(e, "=") || strings.ContainsRune(e, 0) }
		if err != nil {
			if !(bad(a) && strings.HasPrefix(err.Error(), fmt.Sprintf("--env %q: ", a)) ||
				!bad(a) && bad(b) && strings.HasPrefix(err.Error(), fmt.Sprintf("--env %q: ", b))) {
				t.Fatalf("--env %q %q refused with %v", a, b, err)
			}
			return
		}
		if bad(a) || bad(b) {
			t.Fatalf("--env %q %q accepted: %q", a, b, env)
		}
		want := map[string]string{"PATH": defaultPath, "HOME": "/work"}
		if inherit {
			want = map[string]string{"HOST_A": "1", "PATH": "/host/bin"}
		}
		for _, e := range []string{a, b} {
			if k, v, ok := strings.Cut(e, "="); ok {
				want[k] = v
			} else if v, ok := host[e]; ok {
				want[e] = v
			}
		}
		got := map[string]string{}
		for i, kv := range env {
			k, v, ok := strings.Cut(kv, "=")
			if !ok || k == "" {
				t.Fatalf("entry %q", kv)
			}
			if _, dup := got[k]; dup {
				t.Fatalf("%s twice in %q", k, env)
			}
			if !inherit && i < 2 && k != []string{"PATH", "HOME"}[i] {
				t.Fatalf("%q does not start with PATH and HOME", env)
			}
			got[k] = v
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("--env %q %q (inherit %v): %q, want %v", a, b, inherit, env, want)
		}
	})
}

// sizeOracle reads a size the slow way: digits, then an ASCII unit, white
// space around either, in exact arithmetic.
func sizeOracle(s string) (int64, bool) {
	s = strings.TrimSpace(s)
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	if i == 0 {
		return 0, false
	}
	shift := map[string]uint{"": 0, "b": 0, "k": 10, "kb": 10, "kib": 10, "m": 20, "mb": 20, "mib": 20,
		"g": 30, "gb": 30, "gib": 30, "t": 40, "tb": 40, "tib": 40}
	unit := strings.TrimSpace(s[i:])
	lower := strings.Map(func(r rune) rune {
		if r >= 'A' && r <= 'Z' {
			return r + 'a' - 'A'
		}
		return r
	}, unit)
	sh, ok := shift[lower]
	if !ok {
		return 0, false
	}
	n, _ := new(big.Int).SetString(s[:i], 10)
	n.Lsh(n, sh)
	if !n.IsInt64() {
		return 0, false
	}
	return n.Int64(), true
}

// FuzzLimitFlags: --memory, --pids, --cpus and --timeout, declared as
// `moat run` declares them, are either refused with the flag named (by the
// flag package or by check) or applied to a policy that validates, with
// the memory the oracle reads.
func FuzzLimitFlags(f *testing.F) {
	f.Add("256M", "30s", "0.5", int64(64))
	f.Add("1 GiB", "1m30s", "2", int64(0))
	f.Add("12 parsecs", "-5s", "NaN", int64(-1))
	f.Add("0", "0", "+Inf", int64(1))
	f.Add("9223372036854775807K", "1h", "0.001", int64(1<<40))
	f.Fuzz(func(t *testing.T, memory, timeoutArg, cpusArg string, pidsArg int64) {
		fs := flag.NewFlagSet("moat run", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		timeout := fs.Duration("timeout", 0, "")
		limits := addLimitFlags(fs)
		err := fs.Parse([]string{"--timeout=" + timeoutArg, "--cpus=" + cpusArg, "--pids=" + strconv.FormatInt(pidsArg, 10), "--memory=" + memory})
		if err != nil {
			if !strings.Contains(err.Error(), "-timeout") && !strings.Contains(err.Error(), "-cpus") {
				t.Fatalf("flag package error names no flag: %v", err)
			}
			return
		}
		mem, pids, cpus := *limits.memory, *limits.pids, *limits.cpus
		n, sizeOK := sizeOracle(mem)
		badCPUs := cpus != 0 && (math.IsNaN(cpus) || cpus < policies.MinCPUs || cpus > policies.MaxCPUs)
		bad := map[string]bool{"--memory": mem != "" && (!sizeOK || n <= 0), "--pids": pids < 0, "--cpus": badCPUs, "--timeout": *timeout < 0}
		if err := limits.check(*timeout); err != nil {
			flagName, _, _ := strings.Cut(err.Error(), " ")
			if !bad[flagName] {
				t.Fatalf("refused naming %s, which is fine (%v): %v", flagName, bad, err)
			}
			return
		}
		for name, b := range bad {
			if b {
				t.Fatalf("%s accepted: memory %q pids %d cpus %v timeout %v", name, mem, pids, cpus, *timeout)
			}
		}
		// The default policy's limits; the rest of it is not what the flags
		// touch, and validating its allowlist would cost most of the time.
		pol := &policies.Policy{Version: policies.Version, Unfiltered: true, Limits: policies.Limits{
			Timeout: "30s", OutputCap: "1M", TmpfsSize: "64M", Memory: "256M", Pids: 128, CPUs: 1}}
		limits.apply(pol)
		if err := pol.Validate(); err != nil {
			t.Fatalf("accepted flags give a policy that does not validate: %v", err)
		}
		if got, _ := pol.Limits.Memory.Bytes(); mem != "" && got != n {
			t.Fatalf("--memory %q: %d bytes, oracle %d", mem, got, n)
		}
	})
}
