package seccomp

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// compilerRevision names what Compile makes of a profile. Bump it whenever
// the same profile would compile to a different program (the enosys stub,
// the return rewriting, the rule order), so stored programs of older
// builds are no longer found.
const compilerRevision = 1

// ErrNotStored means the store holds no program for the profile.
var ErrNotStored = errors.New("seccomp store: no program stored for this profile")

// StoreError reports a store directory or a stored file that is not
// trusted (wrong owner or mode, a symlink, a bad checksum). The program is
// then compiled again; Path names what to remove or fix.
type StoreError struct {
	Path   string
	Reason string
}

func (e *StoreError) Error() string {
	return fmt.Sprintf("seccomp store: %s: %s", e.Path, e.Reason)
}

// Store keeps compiled programs in a directory across processes, so a
// short-lived process (one `moat run`) does not compile its policy's
// filter on every start: libseccomp takes about 1.4 ms for the default
// policy on the reference host, a sixth of a cold start. crun keeps such a
// cache in its run directory for the same reason (/run/crun/.seccomp-cache,
// containers/crun#1035).
//
// What a stored program is trusted for: it is read only from a directory
// owned by the effective uid with no group or other access, not a symlink,
// and only from a regular file of that owner that no one else may write,
// opened without following symlinks. Its name binds it to the profile's
// Digest, the libseccomp version, the architecture and compilerRevision;
// a SHA-256 trailer over its header and body catches a torn or altered
// file, which is then compiled again and replaced. Whoever can write into
// the directory is this user outside any sandbox, who could as well edit
// the policy. A sandbox must never get a writable mount at or above the
// directory (cmd/moat does not use the store when a bind or the workdir
// would give it one); as root the sandbox runs under another host uid, so
// a file it managed to create there would fail the owner check anyway.
type Store struct {
	Dir string

	compile func(*specs.LinuxSeccomp) (Program, error) // Compile unless a test swaps it
}

// Under reports whether the store directory is path or lies below it, so
// that a writable mount of path would let a sandbox write programs into
// the store. Paths are compared resolved, when they resolve.
func (s *Store) Under(path string) bool {
	resolve := func(p string) string {
		if abs, err := filepath.Abs(p); err == nil {
			p = abs
		}
		if r, err := filepath.EvalSymlinks(p); err == nil {
			return r
		}
		return filepath.Clean(p)
	}
	path, dir := resolve(path), resolve(s.Dir)
	return dir == path || path == "/" || strings.HasPrefix(dir, path+"/")
}

// storeMagic starts every stored file; the key follows on the same line.
const storeMagic = "moat-seccomp-program/1 "

// storeKey names the file of profile's program.
func storeKey(profile *specs.LinuxSeccomp) (string, error) {
	digest, err := Digest(profile)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(fmt.Appendf(nil, "compiler %d\n%s\nlibseccomp %s\narch %s\n",
		compilerRevision, digest, LibraryVersion(), runtime.GOARCH))
	return hex.EncodeToString(sum[:]), nil
}

// Get returns the program stored for profile: ErrNotStored when there is
// none, a *StoreError when the directory or the file is not trusted.
func (s *Store) Get(profile *specs.LinuxSeccomp) (Program, error) {
	key, err := storeKey(profile)
	if err != nil {
		return nil, err
	}
	return s.get(key)
}

// get is Get by the key storeKey derived (a digest of the profile's JSON:
// Program derives it once for its get and put).
func (s *Store) get(key string) (Program, error) {
	if err := s.checkDir(false); err != nil {
		return nil, err
	}
	path := filepath.Join(s.Dir, key+".bpf")
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil, ErrNotStored
	}
	if errors.Is(err, unix.ELOOP) {
		return nil, &StoreError{Path: path, Reason: "is a symlink"}
	}
	if err != nil {
		return nil, fmt.Errorf("seccomp store: open %s: %w", path, err)
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("seccomp store: stat %s: %w", path, err)
	}
	header := storeMagic + key + "\n"
	limit := int64(len(header) + unix.BPF_MAXINSNS*instructionSize + sha256.Size)
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return nil, &StoreError{Path: path, Reason: "is not a regular file"}
	case int(st.Uid) != os.Geteuid():
		return nil, &StoreError{Path: path, Reason: fmt.Sprintf("is owned by uid %d, not %d", st.Uid, os.Geteuid())}
	case st.Mode&0o022 != 0:
		return nil, &StoreError{Path: path, Reason: fmt.Sprintf("mode %#o lets others write it", st.Mode&0o777)}
	case st.Size > limit:
		return nil, &StoreError{Path: path, Reason: fmt.Sprintf("%d bytes is more than a program can be", st.Size)}
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("seccomp store: read %s: %w", path, err)
	}
	if len(b) < len(header)+sha256.Size || !bytes.HasPrefix(b, []byte(header)) {
		return nil, &StoreError{Path: path, Reason: "header does not match its name"}
	}
	body, trailer := b[:len(b)-sha256.Size], b[len(b)-sha256.Size:]
	if sum := sha256.Sum256(body); !bytes.Equal(sum[:], trailer) {
		return nil, &StoreError{Path: path, Reason: "checksum mismatch (torn or altered)"}
	}
	prog, err := ParseProgram(body[len(header):])
	if err != nil {
		return nil, &StoreError{Path: path, Reason: err.Error()}
	}
	return prog, nil
}

// Put stores prog as the program of profile: written to a temporary file
// and renamed, so a reader sees the whole file or none.
func (s *Store) Put(profile *specs.LinuxSeccomp, prog Program) error {
	key, err := storeKey(profile)
	if err != nil {
		return err
	}
	return s.put(key, prog)
}

func (s *Store) put(key string, prog Program) error {
	if err := s.checkDir(true); err != nil {
		return err
	}
	raw, err := prog.MarshalBinary()
	if err != nil {
		return err
	}
	b := append([]byte(storeMagic+key+"\n"), raw...)
	sum := sha256.Sum256(b)
	b = append(b, sum[:]...)
	tmp, err := os.CreateTemp(s.Dir, ".put-*") // 0600
	if err != nil {
		return fmt.Errorf("seccomp store: %w", err)
	}
	_, err = tmp.Write(b)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), filepath.Join(s.Dir, key+".bpf"))
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("seccomp store: %w", err)
	}
	return nil
}

// checkDir makes sure the directory is this user's alone, creating it
// (0700) when create is set.
func (s *Store) checkDir(create bool) error {
	if s.Dir == "" || !filepath.IsAbs(s.Dir) {
		return &StoreError{Path: s.Dir, Reason: "the store directory must be an absolute path"}
	}
	if create {
		if err := os.MkdirAll(s.Dir, 0o700); err != nil {
			return fmt.Errorf("seccomp store: %w", err)
		}
	}
	var st unix.Stat_t
	if err := unix.Lstat(s.Dir, &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return ErrNotStored
		}
		return fmt.Errorf("seccomp store: %s: %w", s.Dir, err)
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFDIR:
		return &StoreError{Path: s.Dir, Reason: "is not a directory (or is a symlink)"}
	case int(st.Uid) != os.Geteuid():
		return &StoreError{Path: s.Dir, Reason: fmt.Sprintf("is owned by uid %d, not %d", st.Uid, os.Geteuid())}
	case st.Mode&0o077 != 0:
		return &StoreError{Path: s.Dir, Reason: fmt.Sprintf("mode %#o gives others access; want 0700", st.Mode&0o777)}
	}
	return nil
}

// Program returns the stored program for profile, or compiles it and
// stores it. A store that cannot be read or written costs only the
// compile; report, when set, hears why (a *StoreError names the file or
// directory to remove or fix). It keeps nothing in memory: a process that
// starts many sandboxes of one policy compiles it once in a Cache instead.
func (s *Store) Program(profile *specs.LinuxSeccomp, report func(error)) (Program, error) {
	if report == nil {
		report = func(error) {}
	}
	compile := s.compile
	if compile == nil {
		compile = Compile
	}
	key, err := storeKey(profile)
	if err != nil {
		return nil, err
	}
	prog, err := s.get(key)
	if err == nil {
		return prog, nil
	}
	var se *StoreError
	badDir := errors.As(err, &se) && se.Path == s.Dir
	if !errors.Is(err, ErrNotStored) {
		report(err)
	}
	if prog, err = compile(profile); err != nil {
		return nil, err
	}
	if !badDir {
		if perr := s.put(key, prog); perr != nil {
			report(perr)
		}
	}
	return prog, nil
}

// Clear removes every stored program (and any leftover temporary file),
// for a store that a sandbox could write into: what it left there must not
// be loaded by a later start. A missing directory is already clear.
func (s *Store) Clear() error {
	entries, err := os.ReadDir(s.Dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("seccomp store: clear: %w", err)
	}
	var errs []error
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".bpf") || strings.HasPrefix(e.Name(), ".put-") {
			if err := os.RemoveAll(filepath.Join(s.Dir, e.Name())); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("seccomp store: clear: %w", err)
	}
	return nil
}
