package executor

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// isToolName is the reference's rule for tool names (contract 2.5).
// It is checked by hand, not as the regexp ^[a-zA-Z0-9_-]{1,64}$: compiling
// regexps at package init cost every moat start a tenth of a millisecond.
func isToolName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// checkRequest refuses a malformed request before anything happens, and
// returns its args compacted.
func checkRequest(req *Request) (json.RawMessage, error) {
	if req == nil {
		return nil, newError(CodeConfig, nil, "dispatch: the request is nil")
	}
	if req.Tool == "" {
		return nil, newError(CodeConfig, nil, "dispatch: the request has an empty tool name; set Request.Tool to the tool's contract name")
	}
	if !isToolName(req.Tool) {
		return nil, newError(CodeConfig, nil, "dispatch: tool name %q is not allowed; names must match ^[a-zA-Z0-9_-]{1,64}$", req.Tool)
	}
	switch req.Executor {
	case "", "subprocess", "container":
	default:
		return nil, newError(CodeConfig, nil, "tool '%s' declares executor '%s'; the isolated executor tags are 'subprocess' and 'container'", req.Tool, req.Executor)
	}
	args, err := compactArgs(req.Args)
	if err != nil {
		return nil, newError(CodeConfig, err, "tool '%s' was not dispatched: its %v", req.Tool, err)
	}
	return args, nil
}

// resolveCommand picks the command and its argv from the tool's spec and the
// provider's fallback (contract 5.2): spec.command when it is a string, even
// empty; otherwise the provider's command; spec.args keeps only strings.
func resolveCommand(req *Request, cfg *Config) (string, []string, error) {
	var spec struct {
		Command *string `json:"command"`
		Args    []any   `json:"args"`
	}
	if len(req.Spec) > 0 {
		// A spec that is not an object (null, a string) counts as {}.
		if err := json.Unmarshal(req.Spec, &spec); err != nil {
			spec.Command, spec.Args = nil, nil
		}
	}
	command := cfg.Command
	if spec.Command != nil {
		command = *spec.Command
	}
	if command == "" {
		fix := cfg.Messages.NoCommand
		if fix == "" {
			fix = "set executorSpec.command on the tool or command on the executor"
		}
		return "", nil, newError(CodeConfig, nil, "tool '%s' has no command: %s", req.Tool, fix)
	}
	argv := append([]string(nil), cfg.Args...)
	for _, a := range spec.Args {
		if s, ok := a.(string); ok {
			argv = append(argv, s)
		}
	}
	return command, argv, nil
}

// defaultPath is searched for a bare command name when the tool environment
// has no PATH, as execvp(3) and libuv do.
const defaultPath = "/usr/local/bin:/usr/bin:/bin"

// lookPath resolves command the way execvp would in the child: a name with a
// slash is taken as a path (relative to dir, the child's cwd), a bare name
// is searched in path. It returns a path that exists and is executable.
func lookPath(command, path, dir string) (string, error) {
	if strings.Contains(command, "/") {
		p := command
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		if err := checkExecutable(p); err != nil {
			return "", fmt.Errorf("exec %q: %w", command, err)
		}
		return p, nil
	}
	if path == "" {
		path = defaultPath
	}
	var denied error
	for _, d := range filepath.SplitList(path) {
		if d == "" || !filepath.IsAbs(d) {
			continue // never resolve against the cwd, as Go's os/exec refuses to
		}
		p := filepath.Join(d, command)
		err := checkExecutable(p)
		if err == nil {
			return p, nil
		}
		if !errors.Is(err, fs.ErrNotExist) && denied == nil {
			denied = fmt.Errorf("exec %q: %s: %w", command, p, err)
		}
	}
	if denied != nil {
		return "", denied
	}
	return "", fmt.Errorf("exec %q: not found in PATH %q: %w", command, path, fs.ErrNotExist)
}

func checkExecutable(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if fi.IsDir() {
		return unix.EISDIR
	}
	if err := unix.Access(p, unix.X_OK); err != nil {
		return unix.EACCES
	}
	return nil
}
