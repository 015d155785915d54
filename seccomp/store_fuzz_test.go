package seccomp

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"
)

// FuzzStoreFile fuzzes what the store reads back, which anyone who can
// write the store's file could have put there. Two properties:
//   - the file on disk: Get loads a program only from exactly the bytes
//     Put writes for it (magic, name, program, HMAC under the store's key);
//     everything else is a *StoreError naming the file, and the program is
//     compiled again;
//   - a writer that holds the key (the fuzz input as the program bytes,
//     with a valid header and MAC): the program is accepted exactly when
//     ParseProgram accepts it, and re-encodes to the same file.
func FuzzStoreFile(f *testing.F) {
	var calls atomic.Int32
	s := counting(filepath.Join(f.TempDir(), "store"), &calls)
	profile := profileOf("read")
	prog := Program{{Code: 0x20, K: 4}, {Code: 0x15, Jt: 0, Jf: 1, K: 0xc000003e}, {Code: 6, K: 0x7fff0000}, {Code: 6}}
	if err := s.Put(profile, prog); err != nil {
		f.Fatal(err)
	}
	key, err := storeKey(profile)
	if err != nil {
		f.Fatal(err)
	}
	path := filepath.Join(s.Dir, key+".bpf")
	good, err := os.ReadFile(path)
	if err != nil {
		f.Fatal(err)
	}
	dir, err := s.openDir(false)
	if err != nil {
		f.Fatal(err)
	}
	mac, err := s.readKey(dir)
	unix.Close(dir)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add(good[:len(good)-1])
	f.Add(append(bytes.Clone(good), 0))
	raw, _ := prog.MarshalBinary()
	f.Add(raw)
	file, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		f.Fatal(err)
	}
	defer file.Close()
	f.Fuzz(func(t *testing.T, data []byte) {
		// Rewritten in place: the same inode, mode 0600, one link; and
		// never truncated to zero first, which on ext4 (auto_da_alloc)
		// writes the file out at its next close: 0.36 ms, not 4 us.
		if _, err := file.WriteAt(data, 0); err != nil {
			t.Fatal(err)
		}
		if err := file.Truncate(int64(len(data))); err != nil {
			t.Fatal(err)
		}
		got, err := s.Get(profile)
		if err != nil {
			var se *StoreError
			if !errors.As(err, &se) || se.Path != path {
				t.Fatalf("refused with %T %v, want a *StoreError naming %s", err, err, path)
			}
		} else if want, _ := encodeStored(key, mac, got); !bytes.Equal(data, want) {
			t.Fatalf("loaded a program from bytes Put would not write:\n%q\n%q", data, want)
		}

		header := []byte(storeMagic + key + "\n")
		signed := append(append(bytes.Clone(header), data...), sum(mac, append(bytes.Clone(header), data...))...)
		p, err := decodeStored(path, key, mac, signed)
		_, perr := ParseProgram(data)
		if (err == nil) != (perr == nil) {
			t.Fatalf("decodeStored %v, ParseProgram %v", err, perr)
		}
		if err != nil {
			var se *StoreError
			if !errors.As(err, &se) || se.Path != path {
				t.Fatalf("refused with %T %v, want a *StoreError naming %s", err, err, path)
			}
			return
		}
		if again, _ := encodeStored(key, mac, p); !bytes.Equal(again, signed) {
			t.Fatal("a program does not re-encode to the file it came from")
		}
	})
}
