package main

import (
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/moat-sandbox/moat/nsexec"
)

// global are runc's global options.
type global struct {
	root      string
	logPath   string
	logFormat string
	debug     bool
	// systemdCgroup: cgroupsPath is the systemd driver's
	// slice:prefix:name (create asks the system manager for the scope).
	systemdCgroup bool
}

// parseGlobal reads the global options before the command. An engine
// that uses the systemd driver passes --systemd-cgroup to every command;
// only create acts on it (scopeCgroup, which refuses a host without
// systemd).
func parseGlobal(args []string) (global, []string, error) {
	g := global{logFormat: "text"}
	p := flagParser{args: args}
	for p.next() {
		switch p.name {
		case "root":
			v, err := p.value()
			if err != nil {
				return g, nil, err
			}
			g.root = v
		case "log":
			v, err := p.value()
			if err != nil {
				return g, nil, err
			}
			g.logPath = v
		case "log-format":
			v, err := p.value()
			if err != nil {
				return g, nil, err
			}
			if v != "text" && v != "json" {
				return g, nil, fmt.Errorf("--log-format %q: use text or json", v)
			}
			g.logFormat = v
		case "debug":
			g.debug = true
		case "systemd-cgroup":
			g.systemdCgroup = p.bool()
		case "rootless":
			p.optValue() // auto, true or false: moat is rootless whenever it is not host root
		case "criu":
			if _, err := p.value(); err != nil {
				return g, nil, err
			}
		default:
			return g, nil, fmt.Errorf("unknown global option --%s", p.name)
		}
	}
	if g.root == "" {
		g.root = defaultRoot()
	}
	return g, p.rest(), nil
}

// defaultRoot is runc's choice: /run/NAME as root, else under
// $XDG_RUNTIME_DIR (rootless podman runs the runtime as uid 0 of its own
// user namespace, where /run is not the caller's).
func defaultRoot() string {
	if x := os.Getenv("XDG_RUNTIME_DIR"); x != "" && !nsexec.IsHostRoot() {
		return x + "/moat-runtime"
	}
	return "/run/moat-runtime"
}

// flagParser walks --name, --name=value, --name value and -n value options
// until the first argument that is not one (or "--").
type flagParser struct {
	args  []string
	i     int
	name  string
	inl   string
	hasIn bool
	done  bool
}

func (p *flagParser) next() bool {
	if p.done || p.i >= len(p.args) {
		return false
	}
	a := p.args[p.i]
	if a == "--" {
		p.i++
		p.done = true
		return false
	}
	if len(a) < 2 || a[0] != '-' {
		p.done = true
		return false
	}
	p.i++
	a = strings.TrimLeft(a, "-")
	p.name, p.inl, p.hasIn = strings.Cut(a, "=")
	return true
}

func (p *flagParser) value() (string, error) {
	if p.hasIn {
		return p.inl, nil
	}
	if p.i >= len(p.args) {
		return "", fmt.Errorf("option --%s needs a value", p.name)
	}
	v := p.args[p.i]
	p.i++
	return v, nil
}

// bool reads a boolean flag: --x or --x=true|false.
func (p *flagParser) bool() bool { return !p.hasIn || p.inl == "true" || p.inl == "1" }

// optValue takes an inline value only.
func (p *flagParser) optValue() string { return p.inl }

func (p *flagParser) rest() []string { return p.args[p.i:] }

// parseCommand reads a command's options (values by name in withValue,
// booleans in bools) and its positional arguments, which may come before,
// between or after options, as urfave/cli allows runc's.
func parseCommand(args []string, withValue, bools []string) (map[string]string, map[string]bool, []string, error) {
	vals := map[string]string{}
	flags := map[string]bool{}
	var pos []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			pos = append(pos, args[i+1:]...)
			break
		}
		if len(a) < 2 || a[0] != '-' {
			pos = append(pos, a)
			continue
		}
		name, inl, hasIn := strings.Cut(strings.TrimLeft(a, "-"), "=")
		switch {
		case slices.Contains(withValue, name):
			if !hasIn {
				if i+1 >= len(args) {
					return nil, nil, nil, fmt.Errorf("option --%s needs a value", name)
				}
				i++
				inl = args[i]
			}
			vals[name] = inl
		case slices.Contains(bools, name):
			flags[name] = !hasIn || inl == "true" || inl == "1"
		default:
			return nil, nil, nil, fmt.Errorf("unknown option %s", a)
		}
	}
	return vals, flags, pos, nil
}
