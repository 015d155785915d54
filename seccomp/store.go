package seccomp

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"

	"github.com/moat-sandbox/moat/nsexec/hostpath"
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
// trusted (wrong owner or mode, a symlink, a bad MAC). The program is then
// compiled again; Path names what to remove or fix.
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
// A stored program is loaded only if it carries an HMAC-SHA256 under the
// store's key, a random 32-byte file in the directory that only this uid
// can read. So the store is safe only for a uid that no untrusted code runs
// as: a root process whose sandboxes run under other host ids, which can
// neither read the key nor forge a MAC, whatever they can write (issue 13,
// item 1). A sandbox that runs as its caller's uid (rootless) could read
// the key through any bind that reaches it; executor/native therefore uses
// a store only as root.
//
// Beyond the MAC, nothing untrusted is even opened: the directory is
// resolved with no symlink in any component (openat2 RESOLVE_NO_SYMLINKS)
// and must be owned by the effective uid with mode exactly 0700; the key
// and every program must be regular files of that owner, mode exactly
// 0600, with one link, opened beneath that directory's descriptor without
// following symlinks. A file's name binds it to the profile's Digest, the
// libseccomp version, the architecture, compilerRevision and the file
// format. Anything else is compiled again and reported; a directory that
// fails a check is neither read nor written.
type Store struct {
	Dir string

	compile func(*specs.LinuxSeccomp) (Program, error) // Compile unless a test swaps it
}

// storeMagic starts every stored file; the key follows on the same line.
const storeMagic = "moat-seccomp-program/2 "

// keyFile holds the store's MAC key, keySize random bytes.
const (
	keyFile = "key"
	keySize = 32
)

// storeKey names the file of profile's program.
func storeKey(profile *specs.LinuxSeccomp) (string, error) {
	digest, err := Digest(profile)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(fmt.Appendf(nil, "%scompiler %d\n%s\nlibseccomp %s\narch %s\n",
		storeMagic, compilerRevision, digest, LibraryVersion(), runtime.GOARCH))
	return hex.EncodeToString(sum[:]), nil
}

// Get returns the program stored for profile: ErrNotStored when there is
// none, a *StoreError when the directory or a file is not trusted.
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
	dir, err := s.openDir(false)
	if err != nil {
		return nil, err
	}
	defer unix.Close(dir)
	mac, err := s.readKey(dir)
	if err != nil {
		return nil, err
	}
	b, err := s.readFile(dir, key+".bpf", int64(len(storeMagic)+len(key)+1+unix.BPF_MAXINSNS*instructionSize+sha256.Size))
	if err != nil {
		return nil, err
	}
	return decodeStored(filepath.Join(s.Dir, key+".bpf"), key, mac, b)
}

// encodeStored is the file Put writes for prog under key: the magic and
// the key on one line, the program, and the HMAC of both under mac.
func encodeStored(key string, mac []byte, prog Program) ([]byte, error) {
	raw, err := prog.MarshalBinary()
	if err != nil {
		return nil, err
	}
	b := append([]byte(storeMagic+key+"\n"), raw...)
	return append(b, sum(mac, b)...), nil
}

// decodeStored checks and decodes the file at path read for key: only
// what encodeStored wrote under mac is a program; anything else is a
// *StoreError naming path.
func decodeStored(path, key string, mac, b []byte) (Program, error) {
	header := storeMagic + key + "\n"
	if len(b) < len(header)+sha256.Size || !bytes.HasPrefix(b, []byte(header)) {
		return nil, &StoreError{Path: path, Reason: "header does not match its name"}
	}
	body, trailer := b[:len(b)-sha256.Size], b[len(b)-sha256.Size:]
	if !hmac.Equal(sum(mac, body), trailer) {
		return nil, &StoreError{Path: path, Reason: "MAC mismatch (torn, altered or not written by this store)"}
	}
	prog, err := ParseProgram(body[len(header):])
	if err != nil {
		return nil, &StoreError{Path: path, Reason: err.Error()}
	}
	return prog, nil
}

func sum(key, body []byte) []byte {
	h := hmac.New(sha256.New, key)
	h.Write(body)
	return h.Sum(nil)
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
	dir, err := s.openDir(true)
	if err != nil {
		return err
	}
	defer unix.Close(dir)
	mac, err := s.readKey(dir)
	if errors.Is(err, ErrNotStored) {
		mac, err = s.makeKey(dir)
	}
	if err != nil {
		return err
	}
	b, err := encodeStored(key, mac, prog)
	if err != nil {
		return err
	}
	return s.writeFile(dir, key+".bpf", b, false)
}

// makeKey creates the store's key, or reads the one a concurrent process
// created first.
func (s *Store) makeKey(dir int) ([]byte, error) {
	k := make([]byte, keySize)
	if _, err := rand.Read(k); err != nil {
		return nil, fmt.Errorf("seccomp store: key: %w", err)
	}
	if err := s.writeFile(dir, keyFile, k, true); err != nil && !errors.Is(err, unix.EEXIST) {
		return nil, err
	}
	return s.readKey(dir)
}

// readKey reads the store's key: ErrNotStored when there is none yet.
func (s *Store) readKey(dir int) ([]byte, error) {
	k, err := s.readFile(dir, keyFile, keySize)
	if err != nil {
		return nil, err
	}
	if len(k) != keySize {
		return nil, &StoreError{Path: filepath.Join(s.Dir, keyFile), Reason: fmt.Sprintf("%d bytes, want %d", len(k), keySize)}
	}
	return k, nil
}

// readFile reads name beneath dir after checking it is a regular file of
// ours, mode 0600, with one link and at most limit bytes.
func (s *Store) readFile(dir int, name string, limit int64) ([]byte, error) {
	path := filepath.Join(s.Dir, name)
	fd, err := unix.Openat(dir, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
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
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return nil, &StoreError{Path: path, Reason: "is not a regular file"}
	case int(st.Uid) != os.Geteuid():
		return nil, &StoreError{Path: path, Reason: fmt.Sprintf("is owned by uid %d, not %d", st.Uid, os.Geteuid())}
	case st.Mode&0o7777 != 0o600:
		return nil, &StoreError{Path: path, Reason: fmt.Sprintf("mode %#o, want exactly 0600", st.Mode&0o7777)}
	case st.Nlink != 1:
		return nil, &StoreError{Path: path, Reason: fmt.Sprintf("has %d links, want 1", st.Nlink)}
	case st.Size > limit:
		return nil, &StoreError{Path: path, Reason: fmt.Sprintf("%d bytes is more than it can be", st.Size)}
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("seccomp store: read %s: %w", path, err)
	}
	return b, nil
}

// writeFile writes b to a fresh temporary file beneath dir and renames it
// to name; with noReplace an existing name is kept (EEXIST).
func (s *Store) writeFile(dir int, name string, b []byte, noReplace bool) error {
	var r [8]byte
	rand.Read(r[:])
	tmp := ".put-" + hex.EncodeToString(r[:])
	fd, err := unix.Openat(dir, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("seccomp store: create %s: %w", filepath.Join(s.Dir, tmp), err)
	}
	f := os.NewFile(uintptr(fd), tmp)
	err = unix.Fchmod(fd, 0o600) // exactly, whatever the umask
	if err == nil {
		_, err = f.Write(b)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		var flags uint
		if noReplace {
			flags = unix.RENAME_NOREPLACE
		}
		err = unix.Renameat2(dir, tmp, dir, name, flags)
	}
	if err != nil {
		unix.Unlinkat(dir, tmp, 0)
		if errors.Is(err, unix.EEXIST) {
			return err
		}
		return fmt.Errorf("seccomp store: write %s: %w", filepath.Join(s.Dir, name), err)
	}
	return nil
}

// openDir opens the store directory, resolved by the rule of
// nsexec/hostpath (a symlink on the way is followed only if root or the
// caller could have planted it: owned by one of them, in directories no
// one else can write), and checks it is this uid's alone (mode exactly
// 0700), creating it and its missing parents (0700), each below the
// descriptor of the one before, when create is set.
func (s *Store) openDir(create bool) (int, error) {
	if s.Dir == "" || !filepath.IsAbs(s.Dir) {
		return -1, &StoreError{Path: s.Dir, Reason: "the store directory must be an absolute path"}
	}
	var opts []hostpath.Option
	if create {
		opts = append(opts, hostpath.CreateDirs(0o700))
	}
	fd, _, err := hostpath.Open(s.Dir, unix.O_PATH|unix.O_DIRECTORY, 0, opts...)
	var le *hostpath.LinkError
	switch {
	case errors.As(err, &le):
		return -1, &StoreError{Path: s.Dir, Reason: fmt.Sprintf("%s is a symlink to %q, not followed: %s", le.Link, le.Target, le.Reason)}
	case errors.Is(err, unix.ENOENT):
		return -1, ErrNotStored
	case errors.Is(err, unix.ENOTDIR):
		return -1, &StoreError{Path: s.Dir, Reason: "is not a directory"}
	case err != nil:
		return -1, fmt.Errorf("seccomp store: %s: %w", s.Dir, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("seccomp store: %s: %w", s.Dir, err)
	}
	switch {
	case int(st.Uid) != os.Geteuid():
		err = &StoreError{Path: s.Dir, Reason: fmt.Sprintf("is owned by uid %d, not %d", st.Uid, os.Geteuid())}
	case st.Mode&0o7777 != 0o700:
		err = &StoreError{Path: s.Dir, Reason: fmt.Sprintf("mode %#o, want exactly 0700", st.Mode&0o7777)}
	}
	if err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
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
	// A directory or key that fails a check is not written either.
	badDir := errors.As(err, &se) && (se.Path == s.Dir || se.Path == filepath.Join(s.Dir, keyFile))
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
