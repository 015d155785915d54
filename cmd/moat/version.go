package main

import (
	"debug/elf"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/moat-sandbox/moat/seccomp"
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
	lib := seccomp.LibraryVersion()
	if lib == "" {
		lib = "none (built without cgo: only the built-in policies' filters run, " + embeddedFilters() + ")"
	}
	fmt.Fprintf(stdout, "moat %s\ncommit %s\ngo %s %s/%s\nlibseccomp %s\nstatic %v\n",
		version, commit, runtime.Version(), runtime.GOOS, runtime.GOARCH, lib, isStatic("/proc/self/exe"))
	return exitOK
}

// isStatic reports whether the ELF file at path needs no dynamic loader: it
// has no PT_INTERP program header and no DT_NEEDED library.
func isStatic(path string) bool {
	f, err := elf.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return false
		}
	}
	libs, err := f.ImportedLibraries()
	return err == nil && len(libs) == 0
}

// embeddedFilters says what a build without libseccomp carries instead.
func embeddedFilters() string {
	if v := seccomp.PrecompiledLibrary(); v != "" {
		return "compiled ahead by libseccomp " + v + "; a custom seccomp profile is refused"
	}
	return "and none is embedded for " + runtime.GOARCH + ": every seccomp profile is refused"
}
