package native_test

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/executor/native"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// storedPrograms lists the .bpf files of a seccomp program store.
func storedPrograms(t *testing.T, dir string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.bpf"))
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// TestSeccompStoreAcrossProviders: the first provider stores its policy's
// program; a later one (a later moat run) reads it back, and one that finds
// it altered says so, compiles again and replaces it.
func TestSeccompStoreAcrossProviders(t *testing.T) {
	store := filepath.Join(t.TempDir(), "store")
	newP := func(log *slog.Logger) *native.Provider {
		p, err := native.New(native.WithSeccompStore(store), native.WithLogger(log), native.WithCommand("/bin/true"))
		if err != nil {
			t.Fatal(err)
		}
		p.Close()
		return p
	}
	newP(slog.New(slog.DiscardHandler))
	files := storedPrograms(t, store)
	if len(files) != 1 {
		t.Fatalf("stored programs after the first provider: %v, want one", files)
	}
	good, _ := os.ReadFile(files[0])
	bad := bytes.Clone(good)
	bad[len(bad)/2] ^= 0xff
	if err := os.WriteFile(files[0], bad, 0o600); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	newP(slog.New(slog.NewTextHandler(&logs, nil)))
	if !strings.Contains(logs.String(), "checksum mismatch") {
		t.Fatalf("an altered stored program was not reported; logs:\n%s", logs.String())
	}
	if now, _ := os.ReadFile(files[0]); !bytes.Equal(now, good) {
		t.Fatal("the altered program was not replaced by a fresh compile")
	}
}

// TestSeccompStoreOutOfTheSandboxesReach is the hostile case: a sandbox
// given a read-write bind above the store tries to plant a program there
// for a later run. The provider does not use the store while such a bind
// exists, and empties it on Close, so nothing the sandbox wrote is loaded.
func TestSeccompStoreOutOfTheSandboxesReach(t *testing.T) {
	asRootAndNobody(t, func(t *testing.T) {
		top := t.TempDir()
		os.Chmod(top, 0o777) // the sandbox's host id may differ from ours (root)
		store := filepath.Join(top, "store")
		p, err := native.New(native.WithSeccompStore(store), native.WithCommand("/bin/true"))
		if err != nil {
			t.Fatal(err)
		}
		p.Close()
		if len(storedPrograms(t, store)) != 1 {
			t.Fatal("the store was not filled")
		}
		plant := `cat >/dev/null; for f in /x/store/*.bpf; do echo forged > "$f"; done; echo forged > /x/store/planted.bpf; printf '{}'`
		p, err = native.New(native.WithSeccompStore(store),
			native.WithBinds(specs.Mount{Source: top, Destination: "/x", Options: []string{"rw"}}),
			native.WithCommand("/bin/sh", "-c", plant))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := dispatchOnce(t, p); err != nil {
			t.Fatalf("dispatch: %v", err)
		}
		p.Close()
		if left := storedPrograms(t, store); len(left) != 0 {
			t.Fatalf("after a sandbox could write the store it still holds %v", left)
		}
		ws := filepath.Join(top, "work")
		os.Mkdir(ws, 0o700)
		p, err = native.New(native.WithSeccompStore(filepath.Join(ws, "store")), native.WithCommand("/bin/true"))
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		if len(storedPrograms(t, filepath.Join(ws, "store"))) != 1 {
			t.Fatal("the store in the workdir was not filled")
		}
		os.Chmod(ws, 0o777)
		st, err := p.Run(t.Context(), &native.Command{Args: []string{"/bin/sh", "-c", "echo forged > /work/store/planted.bpf"}, Workdir: ws})
		if err != nil {
			t.Fatalf("run: %+v %v", st, err)
		}
		if left := storedPrograms(t, filepath.Join(ws, "store")); len(left) != 0 {
			t.Fatalf("after a run whose workdir holds the store it still holds %v", left)
		}
	})
}
