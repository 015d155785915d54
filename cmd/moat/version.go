package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// version is set at link time: -ldflags "-X main.version=v0.1.0".
var version = "dev"

func versionCmd(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		fmt.Fprintln(stderr, "usage: moat version")
		return exitUsage
	}
	commit := "unknown"
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, s := range info.Settings {
			if s.Key == "vcs.revision" {
				commit = s.Value
			}
		}
	}
	fmt.Fprintf(stdout, "moat %s\ncommit %s\ngo %s %s/%s\n", version, commit, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return exitOK
}
