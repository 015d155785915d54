package main

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// socketWarnings returns one warning line for each bind source that is a
// unix socket or directly holds one: connect(2) on a socket file needs no
// network, so a bound docker.sock or D-Bus socket is reachable from a
// sandbox with --net none, and whatever listens there acts with its own
// privileges. moat does not refuse it (binding an agent's socket can be
// the point); it says so.
func socketWarnings(mounts []specs.Mount, workdir string) []string {
	var out []string
	for _, m := range mounts {
		if m.Type == "bind" || m.Type == "" {
			out = appendSocketWarning(out, "bind source "+m.Source, m.Source)
		}
	}
	if workdir != "" {
		out = appendSocketWarning(out, "--workdir "+workdir, workdir)
	}
	return out
}

// exposedSocketWarnings is socketWarnings for the binds --expose-argv
// planned: a socket the command line names, or one in a directory it
// exposes whole, is as reachable as one --bind names.
func exposedSocketWarnings(mounts []specs.Mount) []string {
	var out []string
	for _, m := range mounts {
		what := "--expose-argv " + m.Destination
		if m.Source != m.Destination {
			what += " (" + m.Source + ")"
		}
		out = appendSocketWarning(out, what, m.Source)
	}
	return out
}

// appendSocketWarning appends the warning for src, described as what, when
// it is a unix socket or directly holds one.
func appendSocketWarning(out []string, what, src string) []string {
	fi, err := os.Stat(src)
	if err != nil {
		return out // the mount itself reports a missing source
	}
	if fi.Mode().Type() == fs.ModeSocket {
		return append(out, fmt.Sprintf("moat run: warning: %s is a unix socket: the tool can connect to it, even with --net none", what))
	}
	if !fi.IsDir() {
		return out
	}
	entries, err := os.ReadDir(src)
	if err != nil {
		return out
	}
	var names []string
	for _, e := range entries {
		if e.Type() == fs.ModeSocket {
			names = append(names, filepath.Join(src, e.Name()))
		}
	}
	switch len(names) {
	case 0:
	case 1:
		out = append(out, fmt.Sprintf("moat run: warning: %s holds the unix socket %s: the tool can connect to it, even with --net none", what, names[0]))
	default:
		shown := strings.Join(names[:min(len(names), 3)], ", ")
		if len(names) > 3 {
			shown += ", ..."
		}
		out = append(out, fmt.Sprintf("moat run: warning: %s holds %d unix sockets (%s): the tool can connect to them, even with --net none",
			what, len(names), shown))
	}
	return out
}
