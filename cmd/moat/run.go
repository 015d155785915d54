package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/moat-sandbox/moat/cgroups"
	"github.com/moat-sandbox/moat/executor"
	"github.com/moat-sandbox/moat/executor/native"
	"github.com/moat-sandbox/moat/nsexec"
	"github.com/moat-sandbox/moat/policies"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// Exit statuses of `moat run` beyond the tool's own (as timeout(1) and
// docker run use them).
const (
	exitTimeout       = 124
	exitNotExecutable = 126
	exitNotFound      = 127
)

// defaultPath is the PATH a sandboxed command gets unless --env sets one.
const defaultPath = "/usr/local/bin:/usr/bin:/bin"

// multi is a repeatable string flag.
type multi []string

func (m *multi) String() string     { return strings.Join(*m, ",") }
func (m *multi) Set(v string) error { *m = append(*m, v); return nil }

// runCmd runs a command in the sandbox with stdio passed through.
func runCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("moat run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var binds, envs multi
	policy := fs.String("policy", "default", "policy: a built-in name (moat policy list) or a JSON file")
	rootfs := fs.String("rootfs", "", "use this directory as the read-only root instead of the host's system directories")
	fs.Var(&binds, "bind", "bind SRC on the host at DST inside, SRC:DST[:ro|rw] (read-only by default; repeatable)")
	workdir := fs.String("workdir", "", "host directory mounted read-write at /work (default: a fresh one, removed afterwards)")
	network := fs.String("net", "", "network: none (no interface up) or loopback (lo up); default from the policy")
	var allowHosts, allowCIDRs multi
	fs.Var(&allowHosts, "allow-host", "let CMD reach NAME[:PORT] (an exact name or *.DOMAIN; any port without one) through moat's filtering proxy, found in HTTP_PROXY, HTTPS_PROXY and ALL_PROXY; nothing else is reachable (repeatable)")
	fs.Var(&allowCIDRs, "allow-cidr", "let CMD reach the IP range CIDR[:PORT] through the proxy (10.0.0.0/8, 127.0.0.1/32:8080, [::1]/128:8080; a port admits that one only): raw addresses in it, and names that resolve into it even when it is private or loopback; --allow-host localhost:PORT needs 127.0.0.1/32:PORT (repeatable)")
	fs.Var(&envs, "env", "set NAME=VALUE, or pass NAME from the host environment (repeatable)")
	inherit := fs.Bool("inherit-env", false, "pass the whole host environment, as it is: no PATH or HOME added (for use as another executor's launcher)")
	logFormat := logFormatFlag(fs)
	expose := fs.Bool("expose-argv", false, "bind read-only exactly what CMD names: the executable (looked up in moat's PATH), a script's #! interpreters, and the arguments that are absolute paths of existing files")
	uid := fs.Uint("uid", 0, "uid inside the sandbox (default from the policy, 1000)")
	gid := fs.Uint("gid", 0, "gid inside the sandbox (default from the policy, 1000)")
	timeout := fs.Duration("timeout", 0, "wall-clock limit, e.g. 30s (default from the policy); exit status 124 when hit")
	limits := addLimitFlags(fs)
	cgroupParent := fs.String("cgroup-parent", "", "create the sandbox's cgroup under this delegated group (relative: below moat's own cgroup; absolute: below each hierarchy's root)")
	fs.Usage = func() {
		fmt.Fprint(stderr, `usage: moat run [flags] -- CMD [ARG...]

Runs CMD in a fresh sandbox: new user, mount, pid, net, ipc and uts namespaces,
a read-only root, no capabilities, the policy's seccomp filter and limits.
stdin, stdout and stderr pass through. The environment is empty but for PATH,
HOME and what --env names; with --inherit-env it is moat's own, as it is.
Warnings go to stderr when it is a terminal or --log-format is given.

Exit status: the command's; when signal N ended it, moat run ends by signal
N too (a shell shows 128+N); 124 timeout; 125 the sandbox could not be set
up; 126 not executable; 127 not found; 64 bad flags.

Examples:
  moat run -- /bin/sh -c 'id; echo hi > /work/x; cat /work/x'
  moat run --policy python -- python3 -c 'print(6*7)'
  moat run --bind ./src:/src --net loopback --timeout 10s -- make -C /src test
  moat run --expose-argv -- ./tool.py /data/input.csv
  moat run --allow-host pypi.org --allow-host '*.pythonhosted.org:443' -- pip download requests

Flags:
`)
		fs.PrintDefaults()
	}
	if status, done := parseFlags(fs, args); done {
		return status
	}
	usageErr := usageErrorf(stderr, "run")
	argv := fs.Args()
	if len(argv) == 0 {
		return usageErr("missing the command to run; usage: moat run [flags] -- CMD [ARG...]")
	}
	pol, err := policies.Load(*policy)
	if err != nil {
		return usageErr("%v", err)
	}
	if *rootfs != "" {
		pol.Rootfs = *rootfs
	}
	if *network != "" {
		pol.Network = *network
	}
	if *uid != 0 || *gid != 0 {
		id := policies.Identity{UID: policies.DefaultUID, GID: policies.DefaultGID}
		if pol.Identity != nil {
			id = *pol.Identity
		}
		if *uid != 0 {
			id.UID = uint32(*uid)
		}
		if *gid != 0 {
			id.GID = uint32(*gid)
		}
		pol.Identity = &id
	}
	if err := limits.check(*timeout); err != nil {
		return usageErr("%v", err)
	}
	limits.apply(pol)
	addEgress(pol, allowHosts, allowCIDRs)
	if err := pol.Validate(); err != nil {
		return usageErr("%v", err)
	}
	warnings := warningsTo(*logFormat, stderr)
	if pol.Unfiltered {
		fmt.Fprintln(warnings, unfilteredWarning("moat run", pol))
	}
	mounts, err := parseBinds(binds)
	if err != nil {
		return usageErr("%v", err)
	}
	if *workdir != "" {
		if fi, err := os.Stat(*workdir); err != nil || !fi.IsDir() {
			return usageErr("--workdir %q is not a directory", *workdir)
		}
	}
	for _, w := range socketWarnings(append(append([]specs.Mount(nil), pol.Mounts...), mounts...), *workdir) {
		fmt.Fprintln(warnings, w)
	}
	env, err := parseEnv(envs, *inherit, os.Environ(), os.LookupEnv)
	if err != nil {
		return usageErr("%v", err)
	}
	if *expose {
		var exposed []specs.Mount
		if argv, exposed, err = newExposer(pol.Rootfs, env).exposeArgv(argv); err != nil {
			return exposeStatus(err, stderr)
		}
		for _, w := range exposedSocketWarnings(exposed) {
			fmt.Fprintln(warnings, w)
		}
		mounts = append(mounts, exposed...)
	}

	logger, err := cliLogger(*logFormat, "moat run", warnings)
	if err != nil {
		return usageErr("%v", err)
	}
	opts := append(sandboxOptions(), native.WithPolicy(pol), native.WithBinds(mounts...), native.WithLogger(logger),
		// Where New could not know the mode (it starts full and the first
		// clone decides: native's fallback.go), it is said here, once,
		// before the retried tool runs.
		native.WithModeFallback(func(p executor.Posture) {
			if w := modeWarning("moat run", p); w != "" {
				fmt.Fprintln(stderr, w)
			}
		}))
	if *cgroupParent != "" {
		m, err := cgroups.New(cgroups.WithParent(*cgroupParent))
		if err != nil {
			return usageErr("--cgroup-parent: %v", err)
		}
		defer m.Close()
		opts = append(opts, native.WithCgroups(m))
	}
	if *timeout != 0 {
		opts = append(opts, native.WithTimeout(*timeout))
	}
	if pol.Egress != nil {
		proxy, err := newEgressProxy(logger)
		if err != nil {
			fmt.Fprintf(stderr, "moat run: %v\n", err)
			return exitSandbox
		}
		defer proxy.Close()
		opts = append(opts, native.WithEgressProxy(proxy))
	}
	p, err := native.New(opts...)
	if err != nil {
		if refused("moat run", err, pol, stderr) {
			return exitSandbox
		}
		fmt.Fprintf(stderr, "moat run: %v\n", err)
		if executor.CodeOf(err) == executor.CodeConfig {
			return exitUsage
		}
		return exitSandbox
	}
	defer func() {
		// A group not given back takes no process: say so.
		if err := p.Close(); err != nil {
			fmt.Fprintf(stderr, "moat run: %v\n", err)
		}
	}()
	// A degraded mode is said on stderr whatever the log format: never
	// silently (mode.go).
	if w := modeWarning("moat run", p.Posture()); w != "" {
		fmt.Fprintln(stderr, w)
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	defer signal.Stop(sigs)
	term := saveTerminal()
	defer term.restore()
	st, err := p.Run(context.Background(), &native.Command{
		Args: argv, Env: env, Workdir: *workdir,
		Stdin: os.Stdin, Stdout: fileOr(stdout, os.Stdout), Stderr: fileOr(stderr, os.Stderr), Signals: sigs,
	})
	return runStatus(st, err, stderr)
}

// runStatus maps a sandboxed command's end to the exit status table.
func runStatus(st executor.ExitStatus, err error, stderr io.Writer) int {
	if err != nil {
		// The sandbox's own error says what failed and how to fix it; the
		// provider's "tool '...' could not be set up" wrapping adds nothing here.
		msg := error(err)
		if e, ok := err.(*executor.Error); ok && e.Err != nil {
			msg = e.Err
		}
		fmt.Fprintf(stderr, "moat run: %v\n", msg)
		var se *nsexec.SetupError
		switch {
		case executor.CodeOf(err) == executor.CodeTimeout:
			return exitTimeout
		case errors.As(err, &se) && se.Step == nsexec.StepExec && se.Errno == unix.ENOENT:
			return exitNotFound
		case errors.As(err, &se) && se.Step == nsexec.StepExec:
			return exitNotExecutable
		case executor.CodeOf(err) == executor.CodeOOM:
			return signalStatus(syscall.SIGKILL) // the kernel's OOM kill
		}
		return exitSandbox
	}
	if st.Signal != 0 {
		return signalStatus(st.Signal)
	}
	return st.Code
}

// parseBinds reads SRC:DST[:ro|rw] specs.
func parseBinds(specsIn []string) ([]specs.Mount, error) {
	var out []specs.Mount
	for _, b := range specsIn {
		parts := strings.Split(b, ":")
		mode := "ro"
		if len(parts) == 3 {
			mode = parts[2]
			parts = parts[:2]
		}
		if len(parts) != 2 || parts[0] == "" || parts[1] == "" || (mode != "ro" && mode != "rw") {
			return nil, fmt.Errorf("--bind %q: want SRC:DST, SRC:DST:ro or SRC:DST:rw", b)
		}
		if strings.IndexByte(parts[0], 0) >= 0 {
			return nil, fmt.Errorf("--bind %q: the source holds a NUL byte", b)
		}
		src, err := absPath(parts[0])
		if err != nil {
			return nil, fmt.Errorf("--bind %q: %v", b, err)
		}
		if err := bindDestination(parts[1]); err != nil {
			return nil, fmt.Errorf("--bind %q: %v", b, err)
		}
		out = append(out, specs.Mount{Source: src, Destination: parts[1], Type: "bind", Options: []string{mode}})
	}
	return out, nil
}

func absPath(p string) (string, error) {
	if strings.HasPrefix(p, "/") {
		return p, nil
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	return wd + "/" + strings.TrimPrefix(p, "./"), nil
}

// fileOr returns w as an *os.File when it is one (the process's own
// stdout/stderr), else the fallback: the sandbox needs real descriptors.
func fileOr(w io.Writer, fallback *os.File) *os.File {
	if f, ok := w.(*os.File); ok {
		return f
	}
	return fallback
}
