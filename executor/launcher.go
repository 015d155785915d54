package executor

import (
	"context"
	"os"
	"syscall"
)

// Launcher starts the child of one dispatch. It is the only part in which
// providers differ: the subprocess provider forks a process group, the native
// provider a sandbox, the container provider a docker-compatible CLI.
type Launcher interface {
	Launch(ctx context.Context, l *Launch) (Process, error)
}

// Launch is what a Launcher needs to start one child.
type Launch struct {
	Request *Request
	// AttemptID is the dispatch's attempt id, as in its ledger rows (a
	// container provider names its container after it).
	AttemptID string
	// Path is the program to start and Args its arguments after argv[0]
	// (argv[0] is Path). With a sandbox prefix, Path is the launcher's first
	// word and Args holds the rest of the prefix, the command and its args.
	Path string
	Args []string
	// Env is the child's complete environment (contract 5.3).
	Env []string
	// Workdir is the per-call host directory: the child's cwd (or, in a
	// sandbox, what is mounted at /work).
	Workdir string
	// Stdin, Stdout and Stderr are the child's ends of the three pipes; the
	// pipeline closes its copies once Launch returns.
	Stdin, Stdout, Stderr *os.File
}

// Process is a started child.
type Process interface {
	// Signal sends sig to every process of the dispatch (the process group,
	// or the whole sandbox), not only the direct child. It is a no-op once
	// Wait has returned.
	Signal(sig syscall.Signal) error
	// Wait waits for the direct child to end, then makes sure nothing of the
	// dispatch survives it (a grandchild in the group, the sandbox), and
	// returns how the child ended.
	Wait() (ExitStatus, error)
}

// ExitStatus is how the direct child ended.
type ExitStatus struct {
	// Code is the exit code, or -1 when a signal ended the process.
	Code int
	// Signal is the signal that ended the process, 0 when it exited.
	Signal syscall.Signal
	// Err, when set, is the provider's own diagnosis of the end (an OOM
	// kill, a seccomp kill), which outranks the plain exit classification.
	Err *Error
	// Note, when set, is a diagnostic the provider adds to an exit error's
	// message (for example that the sandbox hit its pids limit).
	Note string
}

// Exited reports whether the child exited (rather than being signalled).
func (s ExitStatus) Exited() bool { return s.Signal == 0 }
