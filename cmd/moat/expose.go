package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/moat-sandbox/moat/policies"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// --expose-argv makes visible, read-only, exactly what the command line
// names: the executable, the interpreters of a script (its #! line, through
// /usr/bin/env too), and the arguments that are absolute paths of existing
// files or directories. Nothing else. argv comes from the trusted caller of
// moat run, never from the tool, so naming a path is consent to show it;
// what must never be shown (the host's kernel interfaces and moat's own
// state) is refused whoever names it.
//
// Each path is bound by itself, a file as a file: siblings stay hidden. One
// exception: a file the command line itself names (the executable or an
// argument) whose path lies below /tmp, in a directory only its owner may
// write and that the caller owns (made for it, as an executor's mkdtemp
// runner directory is, never /tmp itself), is exposed with its directory.
// Inside, /tmp is the tool's own writable tmpfs, so a lone file bound there
// would sit in directories moat creates in that tmpfs: the tool could
// write beside its script, where on the host it cannot, and lose what it
// wrote. Bound whole, the directory is read-only as on the host, and a
// runner finds the modules written beside it. A tool that needs another
// sibling gets it with --bind. As root the tool is a host id of its own,
// for which the caller's 0700 directory is closed: executor/native has
// nsexec make such a read-only bind an id-mapped mount of its owner onto
// the tool's uid (nsexec.WithOwnerMappedBinds), and nothing here changes
// a mode.
//
// The exception is the caller's consent to a directory, so only what the
// caller typed earns it: an interpreter named by a script's #! line (the
// file's contents, perhaps another user's) is bound file by file, else
// "#!/tmp/<someone's private dir>/x" would show all of that directory;
// and a file that is a symlink into another directory is bound alone, as
// the directory its target lies in is not the one the caller named.

// maxInterpreters bounds the #! chain as the kernel does
// (BINPRM_MAX_RECURSION, fs/exec.c).
const maxInterpreters = 4

// neverExposed are the host paths moat never binds into a sandbox, nor any
// path below or above them: the kernel's interfaces (the sandbox has its
// own /proc and /dev) and moat's state (the seccomp program store, host id
// locks).
var neverExposed = []string{"/proc", "/sys", "/dev", "/run/moat"}

// sandboxOwn are the sandbox's own directories: a bind there would hide
// them (or, under /work, write mount points into the caller's workdir).
var sandboxOwn = []string{"/", "/tmp", "/etc", "/work"}

// systemDirs are bound from the host at the same path in every sandbox
// without --rootfs (nsexec's hostDirs): what lies there is already visible.
var systemDirs = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}

// ExposeError is a path --expose-argv refuses or cannot resolve.
type ExposeError struct {
	Path     string // as the command line names it
	Reason   string
	NotFound bool // the executable or an interpreter does not exist
}

func (e *ExposeError) Error() string {
	return fmt.Sprintf("--expose-argv: %q %s", e.Path, e.Reason)
}

// exposer plans the binds of --expose-argv.
type exposer struct {
	callerPath  string   // where a bare command name is looked up (the caller's PATH)
	sandboxPath string   // where /usr/bin/env inside the sandbox will look
	protected   []string // neverExposed plus the seccomp store
	hostRoot    bool     // the sandbox's root shows the host system directories
	scratch     string   // the sandbox's own writable tmpfs, /tmp
	uid         int      // the caller: a directory exposed whole is one it owns
	mounts      []specs.Mount
}

// Where a bare name is searched when no PATH is set: spawnPath by the
// reference's spawn (libuv, glibc's _PATH_DEFPATH), which is what a bare
// command the reference's executor hands moat run would have met without
// it; execvpPath by glibc's execvp(3) (confstr _CS_PATH), which
// /usr/bin/env uses inside the sandbox.
const (
	spawnPath  = "/usr/bin:/bin"
	execvpPath = "/bin:/usr/bin"
)

// newExposer plans for a sandbox with this policy and environment: a bare
// command name is looked up in moat's own PATH (the caller's, as a shell
// would; the reference's spawn's default when the caller has none, as
// under the reference executor), /usr/bin/env NAME in the PATH the command
// gets (execvp's default when it gets none, with --inherit-env).
func newExposer(rootfs string, env []string) *exposer {
	x := &exposer{
		callerPath:  os.Getenv("PATH"),
		sandboxPath: execvpPath,
		protected:   slices.Clone(neverExposed),
		hostRoot:    rootfs == "" || rootfs == policies.RootfsHost,
		scratch:     "/tmp",
		uid:         os.Geteuid(),
	}
	if x.callerPath == "" {
		x.callerPath = spawnPath
	}
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			x.sandboxPath = v
		}
	}
	if dir := seccompStoreDir(); dir != "" {
		x.protected = append(x.protected, filepath.Clean(dir))
	}
	return x
}

// exposeStatus prints why --expose-argv refused and returns the exit
// status: 127 when the command or its interpreter does not exist, else 64.
func exposeStatus(err error, stderr io.Writer) int {
	fmt.Fprintf(stderr, "moat run: %v\n", err)
	var e *ExposeError
	if errors.As(err, &e) && e.NotFound {
		return exitNotFound
	}
	return exitUsage
}

// exposeArgv returns argv with its command resolved to an absolute path
// (the file that was checked and bound is the one executed) and the
// read-only binds that make it run.
func (x *exposer) exposeArgv(argv []string) ([]string, []specs.Mount, error) {
	out := slices.Clone(argv)
	exe, err := x.lookPath(argv[0], x.callerPath)
	if err != nil {
		return nil, nil, err
	}
	out[0] = exe
	if err := x.exposeExecutable(exe, 0); err != nil {
		return nil, nil, err
	}
	for _, a := range argv[1:] {
		if !strings.HasPrefix(a, "/") {
			continue
		}
		if _, err := os.Lstat(a); err != nil {
			continue // not a host path: perhaps one inside the sandbox (/work/out)
		}
		if err := x.expose(a, true); err != nil {
			return nil, nil, err
		}
	}
	return out, x.mounts, nil
}

// lookPath resolves a command name as execvp would with path; a name with a
// slash is taken as is (relative to moat's working directory).
func (x *exposer) lookPath(name, path string) (string, error) {
	if strings.Contains(name, "/") {
		abs, err := filepath.Abs(name)
		if err != nil {
			return "", fmt.Errorf("--expose-argv: %w", err)
		}
		if _, err := os.Stat(abs); err != nil {
			return "", &ExposeError{Path: name, Reason: "does not exist: " + errText(err), NotFound: true}
		}
		return abs, nil
	}
	for _, dir := range filepath.SplitList(path) {
		if !filepath.IsAbs(dir) {
			continue // a relative PATH entry means nothing to the sandbox
		}
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", &ExposeError{Path: name, Reason: "is not in PATH (" + path + "); name it by its absolute path", NotFound: true}
}

// exposeExecutable exposes an executable and, when it is a script, its
// interpreter, recursively. depth 0 is the command the caller named; the
// interpreters below it are the scripts' choice.
func (x *exposer) exposeExecutable(path string, depth int) error {
	if err := x.expose(path, depth == 0); err != nil {
		return err
	}
	interp, arg, ok, err := shebang(path)
	if err != nil || !ok {
		return err
	}
	if depth >= maxInterpreters {
		return &ExposeError{Path: path, Reason: "has more nested #! interpreters than the kernel runs"}
	}
	if !filepath.IsAbs(interp) {
		return &ExposeError{Path: path, Reason: fmt.Sprintf("names the interpreter %q by a relative path; use an absolute one", interp)}
	}
	if err := x.exposeExecutable(interp, depth+1); err != nil {
		return err
	}
	if filepath.Base(interp) != "env" {
		return nil
	}
	// #!/usr/bin/env NAME: env looks NAME up inside, with the sandbox's
	// PATH, so that is where it is resolved here.
	name := envCommand(arg)
	if name == "" {
		return nil
	}
	target, err := x.lookPath(name, x.sandboxPath)
	if err != nil {
		var e *ExposeError
		if errors.As(err, &e) && !strings.Contains(name, "/") {
			e.Reason = fmt.Sprintf("(the interpreter of %s, through %s) is not in the sandbox's PATH (%s); "+
				"set it with --env PATH=... or --inherit-env, or name the interpreter by its absolute path", path, interp, x.sandboxPath)
		}
		return err
	}
	return x.exposeExecutable(target, depth+1)
}

// shebang reads a script's #! line: the interpreter and its one optional
// argument, as the kernel splits them (fs/binfmt_script.c).
func shebang(path string) (interp, arg string, ok bool, err error) {
	f, err := os.Open(path)
	if err != nil {
		return "", "", false, &ExposeError{Path: path, Reason: "cannot be read: " + errText(err)}
	}
	defer f.Close()
	buf := make([]byte, 256) // the kernel's BINPRM_BUF_SIZE
	n, err := io.ReadFull(f, buf)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return "", "", false, &ExposeError{Path: path, Reason: "cannot be read: " + errText(err)}
	}
	line, found := bytes.CutPrefix(buf[:n], []byte("#!"))
	if !found {
		return "", "", false, nil
	}
	if i := bytes.IndexByte(line, '\n'); i >= 0 {
		line = line[:i]
	}
	s := strings.TrimSpace(string(line))
	interp = s
	if i := strings.IndexAny(s, " \t"); i >= 0 {
		interp, arg = s[:i], strings.TrimSpace(s[i+1:])
	}
	return interp, arg, interp != "", nil
}

// envCommand is the command env(1) runs given the #! argument: the first
// word that is neither an option nor an assignment ("-S node --flag",
// "node").
func envCommand(arg string) string {
	for _, w := range strings.Fields(arg) {
		if strings.HasPrefix(w, "-") || strings.Contains(w, "=") {
			continue
		}
		return w
	}
	return ""
}

// expose plans one read-only bind for a host path the command line names
// (typed: by the caller itself, not by a script's #! line), or refuses it.
func (x *exposer) expose(p string, typed bool) error {
	clean := filepath.Clean(p)
	real, err := resolveExposed(clean)
	if err != nil {
		return &ExposeError{Path: p, Reason: "cannot be resolved: " + errText(err)}
	}
	for _, path := range []string{clean, real} {
		if path == "/" {
			return &ExposeError{Path: p, Reason: "is the host's root (resolved: " + real + "); moat never exposes it"}
		}
		for _, q := range x.protected {
			if within(path, q) || within(q, path) {
				if devNode(path) {
					return nil // the sandbox has its own (nsexec devNodes)
				}
				return &ExposeError{Path: p, Reason: fmt.Sprintf("is or contains %s (resolved: %s), which moat never exposes; bind what the tool needs with --bind", q, real)}
			}
		}
	}
	if x.hostRoot && x.visible(real) {
		return nil // bound with the system directories already
	}
	dest := clean
	if x.hostRoot && x.visible(clean) {
		dest = real // a link in /usr leading out: make its target resolve
	}
	if dir := filepath.Dir(dest); typed && within(dir, x.scratch) && dir != x.scratch && x.ownDir(dir, filepath.Dir(real)) {
		if fi, err := os.Stat(real); err == nil && !fi.IsDir() {
			real, dest = filepath.Dir(real), dir
		}
	}
	for _, own := range sandboxOwn {
		if dest == own || (own == "/work" && within(dest, own)) {
			return &ExposeError{Path: p, Reason: "would cover the sandbox's own " + own + "; bind it elsewhere with --bind SRC:DST"}
		}
	}
	for _, m := range x.mounts {
		if within(dest, m.Destination) {
			return nil // the same path, or inside a directory already exposed
		}
	}
	// A directory exposed after paths inside it replaces them.
	x.mounts = slices.DeleteFunc(x.mounts, func(m specs.Mount) bool { return within(m.Destination, dest) })
	x.mounts = append(x.mounts, specs.Mount{Source: real, Destination: dest, Type: "bind", Options: []string{"ro"}})
	return nil
}

func (x *exposer) visible(p string) bool {
	for _, d := range systemDirs {
		if within(p, d) {
			return true
		}
	}
	return false
}

// within reports whether p is dir or lies below it (both clean).
func within(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, strings.TrimSuffix(dir, "/")+"/")
}

// ownDir reports whether a file named in dir (as the command line names
// it) and lying in real (resolved) may bring its directory: dir resolves to
// real (the file is not a symlink into another directory), and real is
// private to the caller.
func (x *exposer) ownDir(dir, real string) bool {
	resolved, err := filepath.EvalSymlinks(dir)
	return err == nil && resolved == real && privateDir(real, x.uid)
}

// privateDir reports a directory that only its owner, uid, may change: not
// group- or world-writable, not sticky.
func privateDir(dir string, uid int) bool {
	fi, err := os.Stat(dir)
	if err != nil || !fi.IsDir() || fi.Mode().Perm()&0o022 != 0 || fi.Mode()&os.ModeSticky != 0 {
		return false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && int(st.Uid) == uid
}

// devNode reports the device nodes every sandbox has at the same path.
func devNode(p string) bool {
	switch p {
	case "/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty":
		return true
	}
	return false
}

func errText(err error) string {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}
