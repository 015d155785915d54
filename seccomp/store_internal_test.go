package seccomp

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/moat-sandbox/moat/conformance/testenv"
)

// counting is the store at dir as a new process sees it, with a stand-in
// compiler that counts its calls and encodes the first syscall name.
func counting(dir string, calls *atomic.Int32) *Store {
	return &Store{Dir: dir, compile: func(p *specs.LinuxSeccomp) (Program, error) {
		calls.Add(1)
		return Program{{Code: 6, K: uint32(len(p.Syscalls[0].Names[0]))}}, nil
	}}
}

func profileOf(name string) *specs.LinuxSeccomp {
	return &specs.LinuxSeccomp{DefaultAction: specs.ActErrno, Syscalls: []specs.LinuxSyscall{{Names: []string{name}, Action: specs.ActAllow}}}
}

func storeFile(t *testing.T, s *Store, p *specs.LinuxSeccomp) string {
	t.Helper()
	key, err := storeKey(p)
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(s.Dir, key+".bpf")
}

// TestStoreServesTheNextProcess: a program compiled by one process is read
// back by the next without compiling, and only for its own profile.
func TestStoreServesTheNextProcess(t *testing.T) {
	s := &Store{Dir: filepath.Join(t.TempDir(), "store")}
	var calls atomic.Int32
	first, err := counting(s.Dir, &calls).Program(profileOf("read"), func(err error) { t.Errorf("report: %v", err) })
	if err != nil || calls.Load() != 1 {
		t.Fatalf("first process: %v, %d compiles", err, calls.Load())
	}
	fi, err := os.Stat(s.Dir)
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("store directory: %v %v, want mode 0700", fi, err)
	}
	calls.Store(0)
	again, err := counting(s.Dir, &calls).Program(profileOf("read"), nil)
	if err != nil || calls.Load() != 0 || !equal(first, again) {
		t.Fatalf("second process: %v, %d compiles, %v vs %v", err, calls.Load(), again, first)
	}
	if _, err := s.Get(profileOf("getpid")); !errors.Is(err, ErrNotStored) {
		t.Fatalf("another profile: %v, want ErrNotStored", err)
	}
	other, _ := counting(s.Dir, &calls).Program(profileOf("getpid"), nil)
	if calls.Load() != 1 || equal(other, first) {
		t.Fatalf("another profile must compile its own program: %d compiles", calls.Load())
	}
}

// TestStoreRefusesWhatItCannotTrust: an altered or torn file, a file others
// may write, a symlink and a directory others can enter are not used: the
// program is compiled again, the reason reported, and a bad file replaced.
func TestStoreRefusesWhatItCannotTrust(t *testing.T) {
	p := profileOf("read")
	fresh := func(t *testing.T) (*Store, Program) {
		s := &Store{Dir: filepath.Join(t.TempDir(), "store")}
		var calls atomic.Int32
		prog, err := counting(s.Dir, &calls).Program(p, nil)
		if err != nil {
			t.Fatal(err)
		}
		return s, prog
	}
	// reload asks a fresh cache and wants one compile and a *StoreError.
	reload := func(t *testing.T, s *Store, want Program) {
		t.Helper()
		var calls atomic.Int32
		var reported error
		got, err := counting(s.Dir, &calls).Program(p, func(err error) { reported = err })
		var se *StoreError
		if err != nil || calls.Load() != 1 || !errors.As(reported, &se) || !equal(got, want) {
			t.Fatalf("got %v (%v), %d compiles, report %v; want a compile and a StoreError", got, err, calls.Load(), reported)
		}
	}
	t.Run("altered", func(t *testing.T) {
		s, prog := fresh(t)
		path := storeFile(t, s, p)
		b, _ := os.ReadFile(path)
		b[len(b)-40] ^= 0xff // inside the program: an attacker's edit
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		reload(t, s, prog)
		if _, err := s.Get(p); err != nil {
			t.Fatalf("the altered file was not replaced: %v", err)
		}
	})
	t.Run("torn", func(t *testing.T) {
		s, prog := fresh(t)
		path := storeFile(t, s, p)
		b, _ := os.ReadFile(path)
		os.WriteFile(path, b[:len(b)/2], 0o600)
		reload(t, s, prog)
	})
	t.Run("writable-by-others", func(t *testing.T) {
		s, prog := fresh(t)
		os.Chmod(storeFile(t, s, p), 0o666)
		reload(t, s, prog)
	})
	t.Run("symlink", func(t *testing.T) {
		s, prog := fresh(t)
		path := storeFile(t, s, p)
		elsewhere := filepath.Join(t.TempDir(), "x.bpf")
		os.Rename(path, elsewhere)
		os.Symlink(elsewhere, path)
		reload(t, s, prog)
	})
	t.Run("open-directory", func(t *testing.T) {
		s, prog := fresh(t)
		os.Chmod(s.Dir, 0o777)
		reload(t, s, prog)
		if fi, _ := os.Stat(s.Dir); fi.Mode().Perm() != 0o777 {
			t.Fatal("the store changed a directory it does not trust")
		}
	})
	t.Run("exact-mode", func(t *testing.T) {
		// The issue 13 reproduction made the store 0500 so it could not be
		// emptied; any mode but 0700 is refused and nothing is written.
		s, prog := fresh(t)
		os.Chmod(s.Dir, 0o500)
		t.Cleanup(func() { os.Chmod(s.Dir, 0o700) })
		reload(t, s, prog)
		if fi, _ := os.Stat(s.Dir); fi.Mode().Perm() != 0o500 {
			t.Fatal("the store changed a directory it does not trust")
		}
	})
	t.Run("forged-checksum", func(t *testing.T) {
		// An allow-all program with a valid header and a SHA-256 trailer,
		// as a sandbox can compute one: without the key it is refused.
		s, prog := fresh(t)
		path := storeFile(t, s, p)
		key := strings.TrimSuffix(filepath.Base(path), ".bpf")
		raw, _ := Program{{Code: 6, K: 0x7fff0000}}.MarshalBinary()
		body := append([]byte(storeMagic+key+"\n"), raw...)
		sum := sha256.Sum256(body)
		os.WriteFile(path, append(body, sum[:]...), 0o600)
		reload(t, s, prog)
	})
	t.Run("other-key", func(t *testing.T) {
		s, prog := fresh(t)
		os.WriteFile(filepath.Join(s.Dir, keyFile), bytes.Repeat([]byte{7}, keySize), 0o600)
		var calls atomic.Int32
		var reported error
		got, err := counting(s.Dir, &calls).Program(p, func(err error) { reported = err })
		if err != nil || calls.Load() != 1 || reported == nil || !strings.Contains(reported.Error(), "MAC mismatch") || !equal(got, prog) {
			t.Fatalf("under another key: %v, %d compiles, report %v", err, calls.Load(), reported)
		}
	})
	t.Run("hardlink", func(t *testing.T) {
		s, prog := fresh(t)
		os.Link(storeFile(t, s, p), filepath.Join(s.Dir, "other"))
		reload(t, s, prog)
	})
	t.Run("key-mode", func(t *testing.T) {
		s, prog := fresh(t)
		os.Chmod(filepath.Join(s.Dir, keyFile), 0o644)
		reload(t, s, prog)
	})
	t.Run("symlink-in-path", func(t *testing.T) {
		// Not yet created, with a symlink in its path that someone else
		// could have planted (issue 28 item 7: the caller's own, in its own
		// directory, is followed): nothing is created where the link
		// points, nothing read through it.
		top := t.TempDir()
		target := filepath.Join(top, "target")
		os.Mkdir(target, 0o700)
		open := filepath.Join(top, "open")
		os.Mkdir(open, 0o777)
		os.Chmod(open, 0o777)
		os.Symlink(target, filepath.Join(open, "link"))
		if os.Geteuid() == 0 {
			os.Lchown(filepath.Join(open, "link"), 65534, 65534)
		}
		top = open
		s := &Store{Dir: filepath.Join(top, "link", "store")}
		var calls atomic.Int32
		var reported error
		if _, err := counting(s.Dir, &calls).Program(p, func(err error) { reported = err }); err != nil || calls.Load() != 1 {
			t.Fatalf("%v, %d compiles", err, calls.Load())
		}
		var se *StoreError
		if !errors.As(reported, &se) || !strings.Contains(se.Reason, "symlink") {
			t.Fatalf("reported %v, want a StoreError naming the symlink", reported)
		}
		if _, err := os.Lstat(filepath.Join(target, "store")); !os.IsNotExist(err) {
			t.Fatalf("the store was created through the symlink: %v", err)
		}
	})
	t.Run("relative-directory", func(t *testing.T) {
		var se *StoreError
		if _, err := (&Store{Dir: "rel"}).Get(p); !errors.As(err, &se) {
			t.Fatalf("got %v, want a StoreError", err)
		}
	})
	if os.Geteuid() == 0 && !t.Failed() {
		testenv.RunAsUser(t, testenv.NobodyUID, testenv.NobodyGID) // and as nobody
	}
}

// TestStoreRefusesAnotherOwner: a file made by another uid (a sandbox of
// root's runs under an unprivileged host id) is never loaded.
func TestStoreRefusesAnotherOwner(t *testing.T) {
	testenv.RequireRoot(t) // to create a file of another owner
	p := profileOf("read")
	s := &Store{Dir: filepath.Join(t.TempDir(), "store")}
	var calls atomic.Int32
	if _, err := counting(s.Dir, &calls).Program(p, nil); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(storeFile(t, s, p), 2000000000, 2000000000); err != nil {
		t.Fatal(err)
	}
	var se *StoreError
	if _, err := s.Get(p); !errors.As(err, &se) {
		t.Fatalf("got %v, want a StoreError for a file of another owner", err)
	}
}

// TestStoreFollowsTheCallersOwnLink (issue 28 item 7): a store directory
// reached through the caller's own link in its own directory, as
// /var/run -> /run is root's, is used: the second run compiles nothing and
// the programs are where the link points.
func TestStoreFollowsTheCallersOwnLink(t *testing.T) {
	top := t.TempDir()
	real := filepath.Join(top, "run")
	os.Mkdir(real, 0o700)
	os.Symlink(real, filepath.Join(top, "varrun"))
	dir := filepath.Join(top, "varrun", "moat", "seccomp")
	var calls atomic.Int32
	var reported error
	for range 2 {
		if _, err := counting(dir, &calls).Program(profileOf("read"), func(err error) { reported = err }); err != nil {
			t.Fatal(err)
		}
	}
	if calls.Load() != 1 || reported != nil {
		t.Fatalf("%d compiles, report %v: want the store used through the caller's own link", calls.Load(), reported)
	}
	if _, err := os.Stat(filepath.Join(real, "moat", "seccomp", keyFile)); err != nil {
		t.Fatalf("the store is not where the link points: %v", err)
	}
}
