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
	check := func(what, src string) {
		fi, err := os.Stat(src)
		if err != nil {
			return // the mount itself reports a missing source
		}
		if fi.Mode().Type() == fs.ModeSocket {
			out = append(out, fmt.Sprintf("moat run: warning: %s is a unix socket: the tool can connect to it, even with --net none", what))
			return
		}
		if !fi.IsDir() {
			return
		}
		entries, err := os.ReadDir(src)
		if err != nil {
			return
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
	}
	for _, m := range mounts {
		if m.Type == "bind" || m.Type == "" {
			check("bind source "+m.Source, m.Source)
		}
	}
	if workdir != "" {
		check("--workdir "+workdir, workdir)
	}
	return out
}
