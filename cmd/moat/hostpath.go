package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/moat-sandbox/moat/nsexec/hostpath"
	"golang.org/x/sys/unix"
)

// resolveExposed is the path --expose-argv binds for p: p resolved by the
// rule of nsexec/hostpath, so a symlink on the way is followed only if
// root or the caller could have planted it. filepath.EvalSymlinks followed
// any, and what it returned has no link left for nsexec to refuse: another
// user's link named on the command line (an argument /shared/input.csv
// leading to /etc/shadow) had root bind its target into the sandbox.
//
// A /proc magic link (/proc/self/root), which hostpath never follows,
// resolves to itself: it lies in /proc, which expose refuses as it refuses
// everything there, with the reason it gives for /proc.
func resolveExposed(p string) (string, error) {
	fd, real, err := hostpath.Open(p, unix.O_PATH, 0)
	var le *hostpath.LinkError
	if errors.As(err, &le) && strings.HasPrefix(le.Link, "/proc/") {
		return le.Link, nil
	}
	if err != nil {
		return "", err
	}
	unix.Close(fd)
	return real, nil
}

// maxArgsFile bounds --args-file: a tool call's arguments, not a data set.
const maxArgsFile = 64 << 20

// readCallerFile reads the regular file at path, resolved by the rule of
// nsexec/hostpath (a symlink on the way is followed only if root or the
// caller could have planted it: another user's link must not hand root's
// tool a file only root may read), without blocking on a FIFO.
func readCallerFile(path string) ([]byte, error) {
	fd, real, err := hostpath.Open(path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), real)
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is a %v, not a regular file", path, fi.Mode().Type())
	}
	b, err := io.ReadAll(io.LimitReader(f, maxArgsFile+1))
	if err == nil && len(b) > maxArgsFile {
		err = fmt.Errorf("%s is larger than %d bytes", path, maxArgsFile)
	}
	return b, err
}
