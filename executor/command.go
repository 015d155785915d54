package executor

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"unicode/utf8"

	"golang.org/x/sys/unix"
)

// isToolName is the reference's definition-time rule for tool names
// (contract 2.5, core's tool()), which Registry.Bind applies.
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
//
// The tool name and the executor tag are taken as the reference's executors
// take them: any string (github.create_issue, my.tool, an empty name), the
// tag recorded in the ledger as given. Refused are only what would hurt the
// host or could not be recorded: a '/' in the name, which would make the
// workdir's path leave its base (the reference's mkdtemp of
// "rulvar-exec-../../x-" makes /tmp/x-XXXXXX), a NUL byte, which no path or
// environment variable can hold, and bytes that are not UTF-8, which no JS
// string holds and no ledger row can record.
func checkRequest(req *Request) (json.RawMessage, error) {
	if req == nil {
		return nil, newError(CodeConfig, nil, "dispatch: the request is nil")
	}
	switch {
	case strings.ContainsRune(req.Tool, '/'):
		return nil, newError(CodeConfig, nil, "dispatch: tool name %q holds a '/', which would make its workdir's path leave the workdir base; name the tool without one", req.Tool)
	case strings.IndexByte(req.Tool, 0) >= 0:
		return nil, newError(CodeConfig, nil, "dispatch: tool name %q holds a NUL byte, which no path or environment variable can; name the tool without one", req.Tool)
	case !utf8.ValidString(req.Tool):
		return nil, newError(CodeConfig, nil, "dispatch: tool name %q is not valid UTF-8, so no ledger row could record it", req.Tool)
	case !utf8.ValidString(req.Executor):
		return nil, newError(CodeConfig, nil, "tool '%s' declares executor %q, which is not valid UTF-8, so no ledger row could record it", req.Tool, req.Executor)
	}
	args, err := compactArgs(req.Args)
	if err != nil {
		return nil, newError(CodeConfig, err, "tool '%s' was not dispatched: its %v", req.Tool, err)
	}
	return args, nil
}

// resolveCommand picks the command and its argv from the tool's spec and the
// provider's fallback (contract 5.2), member by member as the reference
// reads them: spec.command when it is a string, even empty, else the
// provider's command; spec.args when it is an array, keeping only its
// strings, else none. A spec that is not an object (null, a string, an
// array) counts as {}.
func resolveCommand(req *Request, cfg *Config) (string, []string, error) {
	var spec map[string]json.RawMessage
	if len(req.Spec) > 0 {
		if err := json.Unmarshal(req.Spec, &spec); err != nil {
			spec = nil
		}
	}
	command := cfg.Command
	var specCommand string
	if json.Unmarshal(spec["command"], &specCommand) == nil && isJSONString(spec["command"]) {
		command = specCommand
	}
	if command == "" {
		fix := cfg.Messages.NoCommand
		if fix == "" {
			fix = "set executorSpec.command on the tool or command on the executor"
		}
		return "", nil, newError(CodeConfig, nil, "tool '%s' has no command: %s", req.Tool, fix)
	}
	argv := append([]string(nil), cfg.Args...)
	var specArgs []json.RawMessage
	if json.Unmarshal(spec["args"], &specArgs) == nil {
		for _, a := range specArgs {
			var s string
			if isJSONString(a) && json.Unmarshal(a, &s) == nil {
				argv = append(argv, s)
			}
		}
	}
	return command, argv, nil
}

// isJSONString reports whether raw is a JSON string (not null, which
// encoding/json decodes into a string without complaint).
func isJSONString(raw json.RawMessage) bool {
	raw = bytes.TrimLeft(raw, " \t\r\n")
	return len(raw) > 0 && raw[0] == '"'
}

// defaultPath is searched for a bare command name when the tool environment
// has no PATH: _PATH_DEFPATH of glibc's <paths.h>, which libuv, and so the
// reference's spawn, falls back to (a bare "go" that lies only in
// /usr/local/bin is ENOENT there).
const defaultPath = "/usr/bin:/bin"

// lookPath resolves command the way the reference's spawn (libuv's execvp)
// would in the child: a name with a slash is taken as a path (relative to
// dir, the child's cwd), a bare name is searched in path. It returns a path
// that exists and is executable, or an error wrapping the errno the spawn
// would fail with (ENOENT, EACCES).
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
	return "", fmt.Errorf("exec %q: not found in PATH %q: %w", command, path, unix.ENOENT)
}

// spawnError is the reference's spawn failure (contract 5.5): "tool '<tool>'
// could not be spawned: " and Node's own text, "spawn <command> <ERRNO>"
// (spawn /no/such/tool ENOENT), with err as the cause.
func spawnError(tool, command string, err error) *Error {
	return newError(CodeSpawn, err, "tool '%s' could not be spawned: %s", tool, SpawnText(command, err))
}

// SpawnText is how Node words a failed spawn of command: "spawn <command>
// <ERRNO>" when err carries an errno, else err's own text.
func SpawnText(command string, err error) string {
	var errno unix.Errno
	if errors.As(err, &errno) {
		if name := unix.ErrnoName(errno); name != "" {
			return "spawn " + command + " " + name
		}
	}
	return err.Error()
}

func checkExecutable(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if fi.IsDir() {
		// execve(2) of a directory fails EACCES, as Node reports it.
		return fmt.Errorf("is a directory: %w", unix.EACCES)
	}
	if err := unix.Access(p, unix.X_OK); err != nil {
		return fmt.Errorf("not executable: %w", unix.EACCES)
	}
	return nil
}
