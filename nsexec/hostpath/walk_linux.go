//go:build linux

package hostpath

import (
	"errors"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// maxLinks is how many symlinks one walk follows, as the kernel's
// MAXSYMLINKS (include/linux/namei.h).
const maxLinks = 40

// maxRetries bounds the reopenings of a last component that changed
// between the walk's look at it and its open.
const maxRetries = 8

// Option changes how a path is resolved.
type Option func(*config)

type config struct {
	rootOnly bool
	mkdir    bool
	perm     uint32
}

// TrustOnlyRoot follows only root's links in root's directories: the
// caller's own count as anyone else's (see the package doc: a rootless
// sandbox writes as the caller).
func TrustOnlyRoot() Option { return func(c *config) { c.rootOnly = true } }

// CreateDirs makes the missing directories on the way, and the last
// component when the flags include O_DIRECTORY, with mode perm (less the
// umask), each with mkdirat(2) below the descriptor of the one before and
// then judged as any other component.
func CreateDirs(perm uint32) Option {
	return func(c *config) { c.mkdir, c.perm = true, perm }
}

// Open resolves path by the rule (package doc) and opens what it names
// with flags and mode, as openat(2) would; O_NOFOLLOW and O_CLOEXEC are
// added (the walk itself decides about a link in the last component). A
// relative path is taken from the current directory as getcwd(2) gives it.
// It returns the descriptor and the path resolved, with no symlink in it.
// A link the rule refuses is a *LinkError; a component that is missing or
// not a directory is an *os.PathError naming it.
func Open(path string, flags int, mode uint32, opts ...Option) (int, string, error) {
	abs, err := absolute(path)
	if err != nil {
		return -1, "", err
	}
	if fd, err := direct(abs, flags, mode); err == nil {
		return fd, filepath.Clean(abs), nil
	}
	w, parts, err := begin(path, abs, opts)
	if err != nil {
		return -1, "", err
	}
	defer w.close()
	return w.walk(parts, flags, mode)
}

// absolute is path from /: a relative one is taken from the current
// directory as getcwd(2) names it (not os.Getwd, which trusts $PWD, and
// $PWD may name a link). It is not cleaned: ".." is the walk's to resolve.
func absolute(path string) (string, error) {
	if path == "" {
		return "", &os.PathError{Op: "open", Path: path, Err: unix.ENOENT}
	}
	if path[0] == '/' {
		return path, nil
	}
	cwd, err := unix.Getwd()
	if err != nil {
		return "", &os.PathError{Op: "getcwd", Path: path, Err: err}
	}
	return cwd + "/" + path, nil
}

// direct opens path if no component of it is a symlink, in one
// openat2(2) with RESOLVE_NO_SYMLINKS (Linux 5.6): the rule judges links
// only, so such a path is opened as it is, and without a link ".." is the
// lexical parent, so the path resolved is the clean one. It is the common
// case and costs one system call where the walk costs two a component; any
// error (a link: ELOOP; a missing component; an old kernel) leaves the
// path to the walk, which says precisely what is wrong.
func direct(abs string, flags int, mode uint32) (int, error) {
	how := &unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC), Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS}
	if flags&unix.O_CREAT != 0 {
		how.Mode = uint64(mode)
	}
	return unix.Openat2(unix.AT_FDCWD, abs, how)
}

// OpenParent resolves all but the last component of path by the rule and
// returns an O_PATH descriptor of that directory, its resolved path and the
// last component's name, for *at(2) calls on a name that must not be
// followed (the ledger's file and its lock). A path whose last component is
// empty, "." or ".." names no entry: EISDIR.
func OpenParent(path string, opts ...Option) (int, string, string, error) {
	i := strings.LastIndexByte(path, '/')
	dir, name := path[:i+1], path[i+1:]
	if name == "" || name == "." || name == ".." {
		return -1, "", "", &os.PathError{Op: "open", Path: path, Err: unix.EISDIR}
	}
	if dir == "" {
		dir = "."
	}
	fd, real, err := Open(dir, unix.O_PATH|unix.O_DIRECTORY, 0, opts...)
	if le, ok := err.(*LinkError); ok {
		le.Path = path
	}
	if err != nil {
		return -1, "", "", err
	}
	return fd, real, name, nil
}

// level is one directory of the walk, held open.
type level struct {
	fd   int
	path string // resolved, no symlink in it
	// taint says who, besides root and the caller, could change what lies
	// below this directory (this one or one above it); "" when no one.
	taint string
	// shared: sticky and writable by others, who may add entries.
	shared bool
}

type walker struct {
	cfg     config
	euid    uint32
	given   string
	stack   []level // stack[0] is /
	links   int
	retries int
}

func begin(path, abs string, opts []Option) (*walker, []string, error) {
	w := &walker{given: path, euid: uint32(os.Geteuid())}
	for _, o := range opts {
		o(&w.cfg)
	}
	fd, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, &os.PathError{Op: "open", Path: "/", Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, nil, &os.PathError{Op: "stat", Path: "/", Err: err}
	}
	taint, shared := w.judgeDir("/", &st)
	w.stack = []level{{fd: fd, path: "/", taint: taint, shared: shared}}
	return w, strings.Split(abs[1:], "/"), nil
}

func (w *walker) close() {
	for _, l := range w.stack {
		unix.Close(l.fd)
	}
	w.stack = nil
}

func (w *walker) top() *level { return &w.stack[len(w.stack)-1] }

func (w *walker) pop() {
	if len(w.stack) > 1 {
		unix.Close(w.top().fd)
		w.stack = w.stack[:len(w.stack)-1]
	}
}

func join(dir, name string) string {
	if dir == "/" {
		return "/" + name
	}
	return dir + "/" + name
}

func (w *walker) walk(parts []string, flags int, mode uint32) (int, string, error) {
	for len(parts) > 0 {
		name := parts[0]
		parts = parts[1:]
		switch name {
		case "", ".":
			continue
		case "..":
			// Back to the directory the walk came from: the kernel's ".."
			// too, a mount's root included (path_resolution(7)).
			w.pop()
			continue
		}
		last := len(parts) == 0
		top := w.top()
		fd, st, err := w.probe(top, name, last, flags)
		if errors.Is(err, unix.ENOENT) && last && flags&unix.O_CREAT != 0 {
			return w.create(top, name, flags, mode, parts)
		}
		if err != nil {
			return -1, "", err
		}
		if st.Mode&unix.S_IFMT == unix.S_IFLNK {
			if last && flags&(unix.O_CREAT|unix.O_EXCL) == unix.O_CREAT|unix.O_EXCL {
				// As open(2): O_EXCL follows no link, a dangling one included.
				unix.Close(fd)
				return -1, "", &os.PathError{Op: "open", Path: join(top.path, name), Err: unix.EEXIST}
			}
			target, err := w.follow(top, name, fd, st)
			unix.Close(fd)
			if err != nil {
				return -1, "", err
			}
			if strings.HasPrefix(target, "/") {
				for len(w.stack) > 1 {
					w.pop()
				}
			}
			parts = append(strings.Split(strings.TrimPrefix(target, "/"), "/"), parts...)
			continue
		}
		if !last {
			if st.Mode&unix.S_IFMT != unix.S_IFDIR {
				unix.Close(fd)
				return -1, "", &os.PathError{Op: "open", Path: join(top.path, name), Err: unix.ENOTDIR}
			}
			w.push(fd, st, name)
			continue
		}
		out, err := w.finish(top, name, fd, st, flags, mode)
		if errors.Is(err, errChanged) {
			// Look at the same name again.
			if w.retries++; w.retries > maxRetries {
				return -1, "", &ChangedError{Path: join(top.path, name)}
			}
			parts = []string{name}
			continue
		}
		return out, join(top.path, name), err
	}
	// The path ended in "/", "." or "..": it names the directory on top.
	top := w.top()
	fd, err := unix.Openat(top.fd, ".", flags|unix.O_CLOEXEC, mode)
	if err != nil {
		return -1, "", &os.PathError{Op: "open", Path: top.path, Err: err}
	}
	return fd, top.path, nil
}

// probe opens name below top as it is, without following it, and stats it.
// A missing directory is made when CreateDirs says so.
func (w *walker) probe(top *level, name string, last bool, flags int) (int, *unix.Stat_t, error) {
	for made := false; ; made = true {
		fd, err := unix.Openat(top.fd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err == unix.ENOENT && w.cfg.mkdir && !made && (!last || flags&unix.O_DIRECTORY != 0) {
			if err := unix.Mkdirat(top.fd, name, w.cfg.perm); err != nil && err != unix.EEXIST {
				return -1, nil, &os.PathError{Op: "mkdir", Path: join(top.path, name), Err: err}
			}
			continue
		}
		if err != nil {
			return -1, nil, &os.PathError{Op: "open", Path: join(top.path, name), Err: err}
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			unix.Close(fd)
			return -1, nil, &os.PathError{Op: "stat", Path: join(top.path, name), Err: err}
		}
		return fd, &st, nil
	}
}

// follow judges the link open at fd (name, below top) and returns its
// target. The target is read from the very descriptor judged.
func (w *walker) follow(top *level, name string, fd int, st *unix.Stat_t) (string, error) {
	link := join(top.path, name)
	w.links++
	if w.links > maxLinks {
		return "", &LinkError{Path: w.given, Link: link, UID: st.Uid,
			Reason: "more than 40 symlinks on the way (a loop?)"}
	}
	target, err := readlink(fd)
	if err != nil {
		return "", &os.PathError{Op: "readlink", Path: link, Err: err}
	}
	if reason := w.judgeLink(top, st); reason != "" {
		return "", &LinkError{Path: w.given, Link: link, Target: target, UID: st.Uid, Reason: reason}
	}
	if target == "" {
		return "", &os.PathError{Op: "readlink", Path: link, Err: unix.ENOENT}
	}
	return target, nil
}

// readlink reads the target of the link open (O_PATH) at fd.
func readlink(fd int) (string, error) {
	for n := 256; ; n *= 2 {
		b := make([]byte, n)
		m, err := unix.Readlinkat(fd, "", b)
		if err != nil {
			return "", err
		}
		if m < n {
			return string(b[:m]), nil
		}
	}
}

// push enters the directory open at fd (name, below the top).
func (w *walker) push(fd int, st *unix.Stat_t, name string) {
	top := w.top()
	l := level{fd: fd, path: join(top.path, name), taint: top.taint}
	if l.taint == "" {
		l.taint, l.shared = w.judgeDir(l.path, st)
	}
	w.stack = append(w.stack, l)
}

// errChanged: the last component is no longer the inode probed.
var errChanged = errors.New("changed")

// finish opens the last component, probed at pfd (and closes pfd), with
// the caller's flags.
func (w *walker) finish(top *level, name string, pfd int, pst *unix.Stat_t, flags int, mode uint32) (int, error) {
	path := join(top.path, name)
	isDir := pst.Mode&unix.S_IFMT == unix.S_IFDIR
	if flags&unix.O_DIRECTORY != 0 && !isDir {
		unix.Close(pfd)
		return -1, &os.PathError{Op: "open", Path: path, Err: unix.ENOTDIR}
	}
	if flags&^(unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC) == unix.O_PATH {
		return pfd, nil // what was probed is what was asked for
	}
	if isDir {
		// A directory reopens through its own descriptor: no name, no race.
		fd, err := unix.Openat(pfd, ".", flags|unix.O_CLOEXEC, mode)
		unix.Close(pfd)
		if err != nil {
			return -1, &os.PathError{Op: "open", Path: path, Err: err}
		}
		return fd, nil
	}
	unix.Close(pfd)
	fd, err := unix.Openat(top.fd, name, flags|unix.O_NOFOLLOW|unix.O_CLOEXEC, mode)
	if err == unix.ELOOP || err == unix.ENOENT {
		return -1, errChanged // a link now, or gone: look again
	}
	if err != nil {
		return -1, &os.PathError{Op: "open", Path: path, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, &os.PathError{Op: "stat", Path: path, Err: err}
	}
	if st.Dev != pst.Dev || st.Ino != pst.Ino {
		unix.Close(fd)
		return -1, errChanged
	}
	return fd, nil
}

// create opens name below top with O_CREAT: it was missing when probed. A
// link that appeared since makes the open fail (O_NOFOLLOW: ELOOP), and
// the walk looks at it; with O_EXCL any entry, a link included, is EEXIST.
func (w *walker) create(top *level, name string, flags int, mode uint32, parts []string) (int, string, error) {
	path := join(top.path, name)
	fd, err := unix.Openat(top.fd, name, flags|unix.O_NOFOLLOW|unix.O_CLOEXEC, mode)
	if err == unix.ELOOP {
		if w.retries++; w.retries > maxRetries {
			return -1, "", &ChangedError{Path: path}
		}
		return w.walk(append([]string{name}, parts...), flags, mode)
	}
	if err != nil {
		return -1, "", &os.PathError{Op: "open", Path: path, Err: err}
	}
	return fd, path, nil
}
