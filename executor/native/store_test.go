package native_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/executor/native"
	"github.com/moat-sandbox/moat/policies"
	"github.com/moat-sandbox/moat/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
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

// TestSeccompStoreAcrossProviders: as root, the first provider stores its
// policy's program; a later one (a later moat run) reads it back, and one
// that finds it altered says so, compiles again and replaces it. Rootless
// the store is not used at all.
func TestSeccompStoreAcrossProviders(t *testing.T) {
	asRootAndNobody(t, func(t *testing.T) {
		store := filepath.Join(t.TempDir(), "store")
		newP := func(log *slog.Logger) {
			p, err := native.New(native.WithSeccompStore(store), native.WithLogger(log), native.WithCommand("/bin/true"))
			if err != nil {
				t.Fatal(err)
			}
			p.Close()
		}
		newP(slog.New(slog.DiscardHandler))
		files := storedPrograms(t, store)
		if os.Geteuid() != 0 {
			if _, err := os.Stat(store); !os.IsNotExist(err) {
				t.Fatalf("rootless, the store was used: %v, %v", files, err)
			}
			return
		}
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
		if !strings.Contains(logs.String(), "MAC mismatch") {
			t.Fatalf("an altered stored program was not reported; logs:\n%s", logs.String())
		}
		if now, _ := os.ReadFile(files[0]); !bytes.Equal(now, good) {
			t.Fatal("the altered program was not replaced by a fresh compile")
		}
	})
}

// forge is the hostile tool: given a read-write bind of the store's parent
// at /x, it plants an allow-all program for each name in argv[1:] with a
// valid header and a valid MAC: under the store's own key where it can
// read it, else in a store of its own swapped in for the real one. Then it
// says so and stays running, so a second run starts while it still runs.
const forge = `
import hashlib, hmac, os, sys, time
allow = bytes.fromhex(sys.argv[1])
d = "/x/store"
def plant(key):
    for name in sys.argv[2:]:
        body = b"moat-seccomp-program/2 " + name.encode() + b"\n" + allow
        with open(d + "/" + name + ".bpf", "wb") as f:
            f.write(body + hmac.new(key, body, hashlib.sha256).digest())
        os.chmod(d + "/" + name + ".bpf", 0o600)
try:
    plant(open(d + "/key", "rb").read())
    how = "forged under the real key"
except OSError:
    os.rename(d, d + ".old")
    os.mkdir(d, 0o700)
    key = os.urandom(32)
    with open(d + "/key", "wb") as f:
        f.write(key)
    os.chmod(d + "/key", 0o600)
    plant(key)
    how = "swapped in a store of its own"
print(how, flush=True)
sys.stdout.close()
time.sleep(60)
`

// TestSeccompStorePoisonedBySandboxIsNeverLoaded is the hostile case of
// issue 13 item 1: a sandbox with a read-write bind above the store plants
// an allow-all program for the policy, and a second run, started while the
// hostile sandbox still runs, and a third after it ended, must each run
// under the real filter (the default policy denies unshare).
func TestSeccompStorePoisonedBySandboxIsNeverLoaded(t *testing.T) {
	asRootAndNobody(t, func(t *testing.T) {
		top := t.TempDir()
		os.Chmod(top, 0o777) // the sandbox's host id may differ from ours (root)
		store := filepath.Join(top, "store")
		// Fill the store as a moat of this uid would (rootless moat no longer
		// does: this is the store an older moat left, or a library's).
		pol, err := policies.Builtin("default")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := (&seccomp.Store{Dir: store}).Program(pol.Seccomp, nil); err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, f := range storedPrograms(t, store) {
			names = append(names, strings.TrimSuffix(filepath.Base(f), ".bpf"))
		}
		if len(names) != 1 {
			t.Fatalf("stored programs: %v, want one", names)
		}
		allow, _ := seccomp.Program{{Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_ALLOW}}.MarshalBinary()

		hostile, err := native.New(native.WithSeccompStore(store), native.WithPolicy(pol),
			native.WithBinds(specs.Mount{Source: top, Destination: "/x", Options: []string{"rw"}}))
		if err != nil {
			t.Fatal(err)
		}
		defer hostile.Close()
		outR, outW, _ := os.Pipe()
		ctx, kill := context.WithCancel(t.Context())
		defer kill()
		done := make(chan error, 1)
		go func() {
			_, err := hostile.Run(ctx, &native.Command{
				Args:   append([]string{"python3", "-c", forge, hex.EncodeToString(allow)}, names...),
				Env:    []string{"PATH=/usr/bin:/bin"},
				Stdout: outW,
			})
			outW.Close()
			done <- err
		}()
		outR.SetReadDeadline(time.Now().Add(30 * time.Second))
		said, _ := bufio.NewReader(outR).ReadString('\n')
		if !strings.Contains(said, "forged under the real key") && !strings.Contains(said, "swapped in a store of its own") {
			t.Fatalf("the hostile sandbox did not plant its program: %q", said)
		}
		t.Logf("hostile sandbox: %s", strings.TrimSpace(said))

		probe := func(when string) {
			t.Helper()
			p, err := native.New(native.WithSeccompStore(store), native.WithPolicy(pol))
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			out, err := os.CreateTemp(t.TempDir(), "out")
			if err != nil {
				t.Fatal(err)
			}
			_, err = p.Run(t.Context(), &native.Command{
				Args:   []string{"/bin/sh", "-c", "unshare -Ur id -u 2>/dev/null || echo denied"},
				Env:    []string{"PATH=/usr/bin:/bin"},
				Stdout: out, Stderr: out,
			})
			if err != nil {
				t.Fatalf("%s: %v", when, err)
			}
			b, _ := os.ReadFile(out.Name())
			if string(b) != "denied\n" {
				t.Fatalf("%s: the run loaded the planted program: unshare gave %q", when, b)
			}
		}
		probe("while the hostile sandbox runs")
		kill()
		<-done
		probe("after the hostile sandbox")
	})
}
