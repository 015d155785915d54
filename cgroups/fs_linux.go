package cgroups

import (
	"bufio"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// writeFile writes one value to a cgroup control file. Control files exist
// already; they are never created or truncated (kernfs ignores both).
func writeFile(dir, name, value string) error {
	f, err := os.OpenFile(filepath.Join(dir, name), os.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(value)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// readUint reads a single-number control file; "max" reads as 0.
func readUint(dir, name string) (uint64, error) {
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		return 0, err
	}
	s := strings.TrimSpace(string(b))
	if s == "max" {
		return 0, nil
	}
	return strconv.ParseUint(s, 10, 64)
}

// readKV reads a flat keyed file ("key value" per line: memory.events,
// cpu.stat, pids.events, memory.oom_control, cgroup.events).
func readKV(dir, name string) (map[string]uint64, error) {
	f, err := os.Open(filepath.Join(dir, name))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	kv := map[string]uint64{}
	s := bufio.NewScanner(f)
	for s.Scan() {
		k, v, ok := strings.Cut(s.Text(), " ")
		if !ok {
			continue
		}
		if n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64); err == nil {
			kv[k] = n
		}
	}
	return kv, s.Err()
}

// readPids reads cgroup.procs.
func readPids(dir string) ([]int, error) {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		if p, err := strconv.Atoi(f); err == nil {
			pids = append(pids, p)
		}
	}
	return pids, nil
}

// cause drops the *os.PathError wrapper of err, for reasons that already
// name the path.
func cause(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// writable reports whether this process's effective ids may create entries
// in dir (faccessat(2) with AT_EACCESS, so a setuid caller is judged by what
// it can actually do).
func writable(dir string) bool {
	return unix.Faccessat(unix.AT_FDCWD, dir, unix.W_OK|unix.X_OK, unix.AT_EACCESS) == nil
}

// rmdir removes a cgroup directory. ENOENT is success (Delete is
// idempotent). EBUSY right after the last task exited is retried: the kernel
// clears "populated" asynchronously from the task's exit (cgroup-v2.rst,
// "populated" in cgroup.events; the v1 css offlining is likewise deferred).
func rmdir(dir string) error {
	var err error
	for delay := time.Millisecond; ; delay *= 2 {
		err = unix.Rmdir(dir)
		if err == nil || errors.Is(err, unix.ENOENT) {
			return nil
		}
		if !errors.Is(err, unix.EBUSY) || delay > 256*time.Millisecond {
			return &os.PathError{Op: "rmdir", Path: dir, Err: err}
		}
		time.Sleep(delay)
	}
}

// mkdirOwn creates dir and any missing parents, returning the directories
// it created (deepest last) so they can be removed again.
func mkdirOwn(dir string) ([]string, error) {
	var missing []string
	for d := dir; !exists(d); d = filepath.Dir(d) {
		missing = append(missing, d)
		if d == "/" || d == "." {
			break
		}
	}
	var made []string
	for i := len(missing) - 1; i >= 0; i-- {
		if err := os.Mkdir(missing[i], 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return made, err
		}
		made = append(made, missing[i])
	}
	return made, nil
}

// poll calls done until it reports true, an error, or the timeout passes.
func poll(timeout time.Duration, done func() (bool, error)) (bool, error) {
	deadline := time.Now().Add(timeout)
	for delay := 500 * time.Microsecond; ; {
		ok, err := done()
		if ok || err != nil {
			return ok, err
		}
		if time.Now().After(deadline) {
			return false, nil
		}
		time.Sleep(delay)
		if delay < 20*time.Millisecond {
			delay *= 2
		}
	}
}

// removeMade removes, deepest first, the parent directories a tree created.
// One still in use (a leaf of another moat, EBUSY or ENOTEMPTY) or already
// gone is left alone: only what is empty and ours goes.
func removeMade(made []string) error {
	var errs []error
	for i := len(made) - 1; i >= 0; i-- {
		if err := unix.Rmdir(made[i]); err != nil && !errors.Is(err, unix.ENOENT) &&
			!errors.Is(err, unix.EBUSY) && !errors.Is(err, unix.ENOTEMPTY) {
			errs = append(errs, &os.PathError{Op: "rmdir", Path: made[i], Err: err})
		}
	}
	return errors.Join(errs...)
}
