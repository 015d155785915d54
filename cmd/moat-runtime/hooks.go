package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/moat-sandbox/moat/nsexec/oci"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// OCI hooks (runtime-spec config.md "POSIX-platform Hooks", runtime.md
// "Lifecycle"): the engine's programs, run by the command that reaches
// their point of the lifecycle (create, start, delete, run), on the host,
// in its namespaces, as the runtime's own user, never inside the sandbox,
// as under runc: config.json is the engine's trusted input, and a hook is
// the engine running a program of its own (oci.Translate refuses the two
// kinds that run in the container's namespaces). Each gets the container's
// state on stdin, its path and args (args[0] as argv[0]; none: the path)
// with no shell and no PATH lookup, exactly its env (nothing inherited),
// and is waited for, in order; with a timeout it is killed, with its
// process group, when that passes.
//
//	prestart, createRuntime  create, once the init is made and the monitor
//	                         holds it (state: created, the init's pid),
//	                         before the pid file and the commit: a failure
//	                         fails create, which leaves nothing, and then
//	                         the poststop hooks run (runtime.md steps 3, 4,
//	                         12, 13)
//	poststart                start, once the process runs: a failure fails
//	                         start and the container is killed (step 9 of
//	                         runtime-spec since opencontainers/runtime-spec
//	                         #1262, which wrote down what runc always did),
//	                         left stopped, for delete and its poststop
//	                         hooks (runc issue 5182: runc skips them)
//	poststop                 delete (and run's end), once the container is
//	                         gone: a failure is a warning, the other hooks
//	                         still run, delete succeeds (step 13)
//
// start and delete are other processes than create: create keeps the
// poststart and poststop hooks in the state directory (hooksFile), so a
// later change to config.json has no effect on the container (step 2).

// hooksFile is the container's poststart and poststop hooks, in its state
// directory.
const hooksFile = "hooks.json"

// hookOutputMax bounds how much of a failed hook's output its error
// quotes.
const hookOutputMax = 2048

// HookError is a hook that failed: Kind is its config.json array
// (prestart, createRuntime, poststart, poststop), Index its place there.
type HookError struct {
	Kind   string
	Index  int
	Path   string
	Err    error
	Output string // the start of its stdout and stderr
}

func (e *HookError) Error() string {
	s := fmt.Sprintf("%s hook #%d (%s): %v", e.Kind, e.Index, e.Path, e.Err)
	if e.Output != "" {
		s += "; its output: " + e.Output
	}
	return s
}

func (e *HookError) Unwrap() error { return e.Err }

// ErrHookTimeout is a hook killed at its timeout.
var ErrHookTimeout = errors.New("killed at its timeout")

// runHooks runs hooks of kind in order, each given state on stdin, and
// returns the first failure.
func runHooks(kind string, hooks []specs.Hook, state []byte, log *slog.Logger) error {
	if len(hooks) > 0 {
		stdioOnly()
	}
	for i, h := range hooks {
		if err := runHook(kind, i, h, state, log); err != nil {
			return err
		}
	}
	return nil
}

// warnHooks runs every hook of kind, a failure logged as a warning (on
// stderr too, where runc's go without --log).
func warnHooks(kind string, hooks []specs.Hook, state []byte, log *slog.Logger) {
	if len(hooks) > 0 {
		stdioOnly()
	}
	for i, h := range hooks {
		if err := runHook(kind, i, h, state, log); err != nil {
			log.Warn(err.Error())
			fmt.Fprintf(os.Stderr, "moat-runtime: warning: %v\n", err)
		}
	}
}

// stdioOnly marks every descriptor of this process above stdio
// close-on-exec (close_range(2) CLOSE_RANGE_CLOEXEC, Linux 5.11), so a hook
// gets its stdio alone. Go opens its own descriptors close-on-exec, but
// not those the runtime inherited from the engine (exec.Cmd passes them
// on), and when the create hooks run this process also holds the
// sandbox's sync socket and pidfd. The hooks are the last programs a
// runtime command starts (the monitor is started before them), so no
// other exec loses a descriptor it should have had.
func stdioOnly() {
	if unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC) == nil {
		return
	}
	entries, _ := os.ReadDir("/proc/self/fd")
	for _, e := range entries {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
			unix.CloseOnExec(fd)
		}
	}
}

// runHook runs one hook. Its stdin and its stdout and stderr are memfds,
// not pipes: a hook that leaves a daemon holding its descriptors (as
// network hooks do) ends when it exits, not when they are closed, and no
// copying goroutine is left waiting on them.
func runHook(kind string, i int, h specs.Hook, state []byte, log *slog.Logger) error {
	fail := func(err error, out string) error {
		return &HookError{Kind: kind, Index: i, Path: h.Path, Err: err, Output: out}
	}
	in, err := memFile("moat-hook-state", state)
	if err != nil {
		return fail(err, "")
	}
	defer in.Close()
	out, err := memFile("moat-hook-output", nil)
	if err != nil {
		return fail(err, "")
	}
	defer out.Close()
	ctx := context.Background()
	if h.Timeout != nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(*h.Timeout)*time.Second)
		defer cancel()
	}
	// An absolute path (oci.Translate checks it): exec.CommandContext
	// looks nothing up, and no shell is involved.
	cmd := exec.CommandContext(ctx, h.Path)
	if len(h.Args) > 0 {
		cmd.Args = h.Args
	}
	// Env nil would be this process's environment: the hook gets its own
	// alone, as execve(2) with envp.
	cmd.Env = append([]string{}, h.Env...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = in, out, out
	// Its own process group, so the timeout ends what it started too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return unix.Kill(-cmd.Process.Pid, unix.SIGKILL) }
	err = cmd.Run()
	text := readOutput(out)
	if err != nil && ctx.Err() == context.DeadlineExceeded {
		err = fmt.Errorf("%w of %d s", ErrHookTimeout, *h.Timeout)
	}
	if err != nil {
		return fail(err, text)
	}
	log.Debug("hook", "kind", kind, "index", i, "path", h.Path, "output", text)
	return nil
}

// memFile is an anonymous file holding b, read from its start.
func memFile(name string, b []byte) (*os.File, error) {
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("memfd_create: %w", err)
	}
	f := os.NewFile(uintptr(fd), name)
	if _, err := f.Write(b); err != nil {
		f.Close()
		return nil, err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

func readOutput(f *os.File) string {
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return ""
	}
	b, _ := io.ReadAll(io.LimitReader(f, hookOutputMax))
	return strings.TrimSpace(string(b))
}

// hookState is the state document a hook reads, as `state` prints it.
func hookState(s specs.State) []byte {
	if s.Status == specs.StateStopped {
		s.Pid = 0
	}
	b, _ := json.Marshal(s)
	return b
}

// saveHooks keeps the container's poststart and poststop hooks in its
// state directory, for start and delete.
func saveHooks(d *oci.Dir, h *specs.Hooks) error {
	if h == nil || len(h.Poststart)+len(h.Poststop) == 0 {
		return nil
	}
	b, err := json.Marshal(specs.Hooks{Poststart: h.Poststart, Poststop: h.Poststop})
	if err != nil {
		return fmt.Errorf("keep the container's hooks: %w", err)
	}
	// d.At reaches the directory through its descriptor; O_EXCL and
	// O_NOFOLLOW: a file nobody else made.
	f, err := os.OpenFile(d.At(hooksFile), os.O_CREATE|os.O_EXCL|os.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("keep the container's hooks: %w", err)
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("keep the container's hooks: %w", err)
	}
	return nil
}

// loadHooks reads what saveHooks kept; nil when the container has none.
func loadHooks(d *oci.Dir) (*specs.Hooks, error) {
	f, err := os.OpenFile(d.At(hooksFile), os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the container's hooks: %w", err)
	}
	defer f.Close()
	var h specs.Hooks
	if err := json.NewDecoder(io.LimitReader(f, 1<<20)).Decode(&h); err != nil {
		return nil, fmt.Errorf("read the container's hooks: %w", err)
	}
	return &h, nil
}

// createHooks runs the prestart, then the createRuntime hooks, with the
// created state the monitor wrote (the init's pid).
func createHooks(h *specs.Hooks, d *oci.Dir, log *slog.Logger) error {
	if h == nil || len(h.Prestart)+len(h.CreateRuntime) == 0 {
		return nil
	}
	st, err := d.ReadState()
	if err != nil {
		return fmt.Errorf("the state for the create hooks: %w", err)
	}
	state := hookState(st.State)
	if err := runHooks("prestart", h.Prestart, state, log); err != nil {
		return err
	}
	return runHooks("createRuntime", h.CreateRuntime, state, log)
}

// afterFailedCreate runs the poststop hooks of a create that a prestart
// or createRuntime hook failed, once its undo is done: the container
// existed, and the lifecycle goes on at its destruction (runtime.md steps
// 3, 4, 12, 13), so what an earlier hook set up (a network) is undone.
func afterFailedCreate(err error, id, bundle string, spec *specs.Spec, log *slog.Logger) {
	var he *HookError
	if !errors.As(err, &he) || spec.Hooks == nil || len(spec.Hooks.Poststop) == 0 {
		return
	}
	st := specs.State{Version: specs.Version, ID: id, Status: specs.StateStopped, Bundle: bundle, Annotations: spec.Annotations}
	warnHooks("poststop", spec.Hooks.Poststop, hookState(st), log)
}

// poststart runs the container's poststart hooks once start has started
// its process. The state they get is the container's at that start:
// running, with the init's pid, even if the process has already ended
// (the hooks are told of the start). A failure kills the container and
// fails start; the container is left stopped, for delete.
func (r *runtime) poststart(d *oci.Dir, st *oci.State) error {
	h, err := loadHooks(d)
	if err == nil && (h == nil || len(h.Poststart) == 0) {
		return nil
	}
	if err == nil {
		s := st.State
		s.Status = specs.StateRunning
		err = runHooks("poststart", h.Poststart, hookState(s), r.log.logger)
	}
	if err == nil {
		return nil
	}
	request(d.At(controlSocket), ctlRequest{Op: "kill", Signal: int(unix.SIGKILL), All: true})
	waitGone(st.Pid, st.PidStart, 10*time.Second)
	return fmt.Errorf("start container %s: %w (the container is killed)", st.ID, err)
}

// poststopLater reads a container's poststop hooks before its state goes
// and returns what runs them once it has (delete, run's end). The state
// they get is stopped.
func (r *runtime) poststopLater(d *oci.Dir, st *oci.State) func() {
	if st == nil {
		return func() {}
	}
	h, err := loadHooks(d)
	if err != nil {
		r.log.logger.Warn(err.Error())
		fmt.Fprintf(os.Stderr, "moat-runtime: warning: %v\n", err)
		return func() {}
	}
	if h == nil || len(h.Poststop) == 0 {
		return func() {}
	}
	s := st.State
	s.Status = specs.StateStopped
	state := hookState(s)
	return func() { warnHooks("poststop", h.Poststop, state, r.log.logger) }
}
