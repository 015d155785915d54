// Command moatbench runs the same tool on the same host rootfs through plain
// exec, `moat run`, bwrap (with and without a seccomp filter), crun and runc
// where they are installed, and prints the median, p95 and the ratio to moat
// of each, sequential and two in parallel (issue 9). Every figure is a ratio
// measured side by side in one run; the absolute times only say what this
// host was doing.
//
//	moatbench [-n 200] [-moat PATH] [-tools true,python3] [-rootless=true]
//
// As root it measures as root, then runs itself again as nobody for the
// rootless table (-rootless=false skips that). Without -moat it builds the
// release binaries (moat and moat-init, .ci/build-static) into a temporary
// directory (run it from the module root). On a hybrid-cgroup host crun
// runs from a thread whose private mount namespace hides the cgroup2 mount
// (crun refuses that layout), as root only.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

type config struct {
	n        int
	moat     string
	tools    []string
	rootless bool
	child    bool // the re-run as nobody
	work     string
}

func run(args []string) int {
	fs := flag.NewFlagSet("moatbench", flag.ContinueOnError)
	n := fs.Int("n", 200, "runs per runner and tool")
	moat := fs.String("moat", "", "the moat binary (default: build ./cmd/moat)")
	tools := fs.String("tools", "true,python3", "tools to run: true (/bin/true), python3 (python3 -c pass)")
	rootless := fs.Bool("rootless", true, "when root, also measure as nobody")
	child := fs.Bool("as-child", false, "internal: the re-run as nobody")
	work := fs.String("work", "", "internal: the shared work directory")
	if err := fs.Parse(args); err != nil {
		return 64
	}
	cfg := config{n: *n, moat: *moat, tools: strings.Split(*tools, ","), rootless: *rootless, child: *child, work: *work}
	if err := bench(&cfg); err != nil {
		fmt.Fprintf(os.Stderr, "moatbench: %v\n", err)
		return 1
	}
	return 0
}

// bench prepares the shared artifacts once (as root, readable by nobody),
// measures, and re-runs itself as nobody for the rootless half.
func bench(cfg *config) error {
	if cfg.work == "" {
		dir, err := os.MkdirTemp("", "moatbench-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		if err := os.Chmod(dir, 0o755); err != nil {
			return err
		}
		cfg.work = dir
	}
	if cfg.moat == "" {
		path, err := buildMoat(cfg.work)
		if err != nil {
			return err
		}
		cfg.moat = path
	}
	env, err := prepare(cfg)
	if err != nil {
		return err
	}
	who := "root"
	if os.Geteuid() != 0 {
		who = "rootless (uid " + fmt.Sprint(os.Geteuid()) + ")"
	}
	fmt.Printf("## %s, %d runs each, %s\n\n", who, cfg.n, hostLine())
	for _, tool := range cfg.tools {
		argv, ok := toolArgv[tool]
		if !ok {
			return fmt.Errorf("unknown tool %q (true, python3)", tool)
		}
		rows := measureAll(env, argv, cfg.n)
		printTable(os.Stdout, tool, rows)
	}
	for _, s := range env.skipped {
		fmt.Printf("- skipped %s: %s\n", s.name, s.reason)
	}
	fmt.Println()
	if os.Geteuid() == 0 && cfg.rootless && !cfg.child {
		return rerunAsNobody(cfg)
	}
	return nil
}

// toolArgv are the tools, the same inside and outside every sandbox.
var toolArgv = map[string][]string{
	"true":    {"/bin/true"},
	"python3": {"/usr/bin/python3", "-c", "pass"},
}
