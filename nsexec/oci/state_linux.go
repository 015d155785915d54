package oci

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"time"

	"github.com/moat-sandbox/moat/nsexec/hostpath"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// idPattern is the container IDs accepted: a directory name that cannot be
// "." or "..", hidden, an option, or a path (runc accepts [\w+-.]+).
var idPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.+-]{0,253}$`)

// ValidID checks a container ID before it names anything on the host.
func ValidID(id string) error {
	if !idPattern.MatchString(id) {
		return &IDError{ID: id, Reason: "use 1 to 254 of [A-Za-z0-9_.+-], starting with a letter or digit"}
	}
	return nil
}

// Root is the state directory of every container of one runtime --root.
type Root struct {
	path string
	fd   int
}

// OpenRoot creates path (0700, parents included) if missing and opens it,
// resolved by the rule of nsexec/hostpath: a symlink on the way, the last
// component included, is followed only if root or the caller could have
// planted it (os.MkdirAll followed any, so another user's link had root
// make the state directory where it pointed); a refused one is a
// *hostpath.LinkError. It must be a directory owned by the caller that no
// one else can write: another user's directory, or one the group or others
// can write, would let them plant a container's state. Path is then the
// resolved path.
func OpenRoot(path string) (*Root, error) {
	fd, abs, err := hostpath.Open(path, unix.O_PATH|unix.O_DIRECTORY, 0, hostpath.CreateDirs(0o700))
	if err != nil {
		return nil, fmt.Errorf("state root %s: %w", path, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("state root %s: %w", abs, err)
	}
	if int(st.Uid) != os.Geteuid() || st.Mode&0o022 != 0 {
		unix.Close(fd)
		return nil, fmt.Errorf("state root %s: owned by uid %d with mode %#o; it must be the caller's (uid %d) and writable by no one else", abs, st.Uid, st.Mode&0o7777, os.Geteuid())
	}
	return &Root{path: abs, fd: fd}, nil
}

// Close releases the root's descriptor.
func (r *Root) Close() error { return unix.Close(r.fd) }

// Path is the root's absolute path.
func (r *Root) Path() string { return r.path }

// Create makes the state directory of a new container (0700), or returns
// ErrExist.
func (r *Root) Create(id string) (*Dir, error) {
	if err := ValidID(id); err != nil {
		return nil, err
	}
	if err := unix.Mkdirat(r.fd, id, 0o700); err != nil {
		if errors.Is(err, unix.EEXIST) {
			return nil, fmt.Errorf("create container %s: %w", id, ErrExist)
		}
		return nil, fmt.Errorf("create container %s: %w", id, err)
	}
	return r.Open(id)
}

// Open opens the state directory of container id, or returns ErrNotExist.
func (r *Root) Open(id string) (*Dir, error) {
	if err := ValidID(id); err != nil {
		return nil, err
	}
	fd, err := unix.Openat(r.fd, id, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil, fmt.Errorf("container %s: %w", id, ErrNotExist)
		}
		return nil, fmt.Errorf("container %s: %w", id, err)
	}
	// The Dir keeps its own descriptor of the root, to remove itself from
	// it after the Root was closed.
	parent, err := unix.Dup(r.fd)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("container %s: %w", id, err)
	}
	unix.CloseOnExec(parent)
	return &Dir{fd: fd, id: id, parent: parent}, nil
}

// List returns the IDs of the containers under the root.
func (r *Root) List() ([]string, error) {
	entries, err := os.ReadDir(fmt.Sprintf("/proc/self/fd/%d", r.fd))
	if err != nil {
		return nil, fmt.Errorf("list containers: %w", err)
	}
	var ids []string
	for _, e := range entries {
		if e.IsDir() && ValidID(e.Name()) == nil {
			ids = append(ids, e.Name())
		}
	}
	return ids, nil
}

// Dir is one container's state directory.
type Dir struct {
	fd, parent int
	id         string
}

// Close releases the directory's descriptors.
func (d *Dir) Close() error {
	unix.Close(d.parent)
	return unix.Close(d.fd)
}

// At is a path that reaches name in the directory through the descriptor
// (no component can be swapped for a symlink), short enough for a unix
// socket address whatever the root's length.
func (d *Dir) At(name string) string { return fmt.Sprintf("/proc/self/fd/%d/%s", d.fd, name) }

// Remove deletes the directory and its files (no subdirectories are
// made). The Dir is closed.
func (d *Dir) Remove() error {
	entries, err := os.ReadDir(fmt.Sprintf("/proc/self/fd/%d", d.fd))
	if err != nil {
		d.Close()
		return fmt.Errorf("remove container %s: %w", d.id, err)
	}
	for _, e := range entries {
		if err := unix.Unlinkat(d.fd, e.Name(), 0); err != nil && !errors.Is(err, unix.ENOENT) {
			d.Close()
			return fmt.Errorf("remove container %s: %s: %w", d.id, e.Name(), err)
		}
	}
	err = unix.Unlinkat(d.parent, d.id, unix.AT_REMOVEDIR)
	d.Close()
	if err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("remove container %s: %w", d.id, err)
	}
	return nil
}

// State is what the runtime keeps of a container: the OCI state, whose
// Pid is the container's init, and what tells the init and the monitor
// from later processes with the same pids.
type State struct {
	specs.State
	// PidStart is the init's start time (field 22 of /proc/PID/stat).
	PidStart uint64 `json:"pidStart,omitempty"`
	// Monitor is the pid of the container's monitor, the process that
	// holds the sandbox and answers the control socket, and MonitorStart
	// its start time.
	Monitor      int       `json:"monitor,omitempty"`
	MonitorStart uint64    `json:"monitorStart,omitempty"`
	Created      time.Time `json:"created"`
	// Exit is the wait status the monitor recorded when the process ended.
	Exit *int `json:"exit,omitempty"`
}

const stateFile = "state.json"

// WriteState replaces state.json atomically (a new file, then rename).
func (d *Dir) WriteState(s *State) error {
	return d.writeJSON(stateFile, s)
}

// writeJSON replaces the file name with v as JSON, atomically.
func (d *Dir) writeJSON(name string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("write state of %s: %w", d.id, err)
	}
	tmp := name + ".tmp" + strconv.Itoa(os.Getpid())
	fd, err := unix.Openat(d.fd, tmp, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("write state of %s: %w", d.id, err)
	}
	f := os.NewFile(uintptr(fd), tmp)
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = unix.Renameat(d.fd, tmp, d.fd, name)
	}
	if err != nil {
		unix.Unlinkat(d.fd, tmp, 0)
		return fmt.Errorf("write state of %s: %w", d.id, err)
	}
	return nil
}

// ReadState reads state.json.
func (d *Dir) ReadState() (*State, error) {
	fd, err := unix.Openat(d.fd, stateFile, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil, fmt.Errorf("read state of %s: %w (the container is still being created, or its create failed)", d.id, ErrNotExist)
		}
		return nil, fmt.Errorf("read state of %s: %w", d.id, err)
	}
	f := os.NewFile(uintptr(fd), stateFile)
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("read state of %s: %w", d.id, err)
	}
	var s State
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("read state of %s: %w", d.id, err)
	}
	return &s, nil
}

// StartTime returns field 22 of /proc/pid/stat, the process's start time
// in clock ticks since boot; with the pid it names one process for good.
func StartTime(pid int) (uint64, error) {
	_, start, err := procStat(pid)
	return start, err
}

// procStat returns field 3 (the state letter) and field 22 (the start time)
// of /proc/pid/stat.
func procStat(pid int) (byte, uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, err
	}
	// The command name (field 2) may hold spaces and parentheses: count
	// from the last ')'.
	i := len(b) - 1
	for i >= 0 && b[i] != ')' {
		i--
	}
	if i < 0 {
		return 0, 0, fmt.Errorf("parse /proc/%d/stat", pid)
	}
	var f [20]string
	n := 0
	start := -1
	for j := i + 2; j <= len(b) && n < len(f); j++ {
		if j == len(b) || b[j] == ' ' || b[j] == '\n' {
			if start >= 0 {
				f[n] = string(b[start:j])
				n++
				start = -1
			}
		} else if start < 0 {
			start = j
		}
	}
	// f[0] is field 3 (state); field 22 is f[19].
	if n < 20 || len(f[0]) != 1 {
		return 0, 0, fmt.Errorf("parse /proc/%d/stat", pid)
	}
	t, err := strconv.ParseUint(f[19], 10, 64)
	return f[0][0], t, err
}

// Alive says whether the process pid that started at start still runs: a
// zombie does not (an init that exited and its subreaper has not reaped
// yet is a stopped container, as runc reads it).
func Alive(pid int, start uint64) bool {
	if pid <= 0 {
		return false
	}
	state, got, err := procStat(pid)
	return err == nil && got == start && state != 'Z' && state != 'X'
}
