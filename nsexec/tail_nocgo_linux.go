//go:build linux && !cgo

package nsexec

import "golang.org/x/sys/unix"

// haveTail: without cgo there is no C tail; the Go init stays pid 1 to the
// end (pid1_linux.go).
const haveTail = false

func tailOrigNofile() (unix.Rlimit, bool) { return unix.Rlimit{}, false }

// tailParse, tailParseExec, tailSteps, tailLookup and tailDefaultPath exist for the tests, which skip without a tail.
func tailParse([]byte) (argc, total int, why string) { return 0, 0, "no tail" }

func tailParseExec([]byte) (r execRequest, argc, total int, why string) { return r, 0, 0, "no tail" }

func tailSteps() map[Step]int { return nil }

func tailLookup(string, []string) (string, error) { return "", unix.ENOSYS }

func tailDefaultPath() string { return "" }
