package native_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/conformance/testenv"
	"github.com/moat-sandbox/moat/executor/native"
	"github.com/moat-sandbox/moat/policies"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// runPolicy runs sh -c script under pol and returns its stdout.
func runPolicy(t *testing.T, pol *policies.Policy, script string) (string, error) {
	t.Helper()
	p, err := native.New(native.WithPolicy(pol), native.WithoutCgroups(), native.WithTimeout(20*time.Second))
	if err != nil {
		return "", err
	}
	defer p.Close()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	done := make(chan struct{})
	go func() { io.Copy(&out, r); close(done) }()
	st, err := p.Run(context.Background(), &native.Command{
		Args: []string{"/bin/sh", "-c", script}, Env: []string{"PATH=/usr/bin:/bin"}, Stdout: w, Stderr: w,
	})
	w.Close()
	<-done
	r.Close()
	if err == nil && st.Code != 0 {
		err = fmt.Errorf("exit %d: %s", st.Code, out.String())
	}
	return out.String(), err
}

func parsePolicy(t *testing.T, doc string) *policies.Policy {
	t.Helper()
	p, err := policies.Parse(strings.NewReader(doc))
	if err != nil {
		t.Fatalf("parse %s: %v", doc, err)
	}
	if p, err = policies.Resolve(p); err != nil {
		t.Fatalf("resolve %s: %v", doc, err)
	}
	return p
}

// Issue 13, item 3, as reproduced: a policy's tmpfs was a read-write bind
// of moat's current directory. Run from a directory holding a key and a
// .bashrc, the tool must see an empty, fresh tmpfs and leave both alone.
func TestPolicyTmpfsIsFreshNotTheCwd(t *testing.T) {
	if os.Geteuid() == 0 && !testenv.ReRun() {
		t.Run("root", testTmpfsIsFresh)
		testenv.RunAsUser(t, testenv.NobodyUID, testenv.NobodyGID)
		return
	}
	testTmpfsIsFresh(t)
}

func testTmpfsIsFresh(t *testing.T) {
	home := t.TempDir()
	os.WriteFile(filepath.Join(home, "id_ed25519"), []byte("PRIVATE KEY"), 0o600)
	os.WriteFile(filepath.Join(home, ".bashrc"), []byte("# mine\n"), 0o600)
	t.Chdir(home)
	pol := parsePolicy(t, `{"extends":"default","mounts":[{"type":"tmpfs","destination":"/scratch","options":["rw"]}]}`)
	out, err := runPolicy(t, pol, `ls -A /scratch; cat /scratch/id_ed25519 2>/dev/null; echo pwned >> /scratch/.bashrc;
		grep ' /scratch ' /proc/self/mountinfo`)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, "PRIVATE KEY") || strings.Contains(out, "id_ed25519") {
		t.Fatalf("the tool saw the caller's cwd through the tmpfs:\n%s", out)
	}
	if b, _ := os.ReadFile(filepath.Join(home, ".bashrc")); string(b) != "# mine\n" {
		t.Fatalf("the tool wrote the caller's .bashrc through the tmpfs: %q", b)
	}
	if !strings.Contains(out, " - tmpfs ") || !strings.Contains(out, "size=65536k") {
		t.Fatalf("/scratch is not a tmpfs capped at the policy's tmpfsSize (64M):\n%s", out)
	}
}

// Every mount a policy may not build as it says is refused before any
// sandbox starts, with the JSON path of the culprit.
func TestPolicyMountsRefused(t *testing.T) {
	for _, tc := range []struct {
		mount specs.Mount
		path  string
	}{
		{specs.Mount{Type: "overlay", Destination: "/x"}, "mounts[0].type"},
		{specs.Mount{Type: "proc", Source: "proc", Destination: "/x"}, "mounts[0].type"},
		{specs.Mount{Type: "tmpfs", Source: "/home", Destination: "/x"}, "mounts[0].source"},
		{specs.Mount{Type: "tmpfs", Destination: "/x", Options: []string{"size=0"}}, "mounts[0].options[0]"},
		{specs.Mount{Type: "tmpfs", Destination: "/x", Options: []string{"nr_inodes=0"}}, "mounts[0].options[0]"},
		{specs.Mount{Type: "tmpfs", Destination: "/x", Options: []string{"size=50%"}}, "mounts[0].options[0]"},
		{specs.Mount{Type: "tmpfs", Destination: "/x", Options: []string{"rbind"}}, "mounts[0].options[0]"},
		{specs.Mount{Type: "tmpfs", Destination: "/x", Options: []string{"uid=0"}}, "mounts[0].options[0]"},
		{specs.Mount{Type: "bind", Destination: "/x"}, "mounts[0].source"},
		{specs.Mount{Type: "bind", Source: "/usr", Destination: "/x", Options: []string{"ro", "rw"}}, "mounts[0].options"},
		{specs.Mount{Type: "bind", Source: "/usr", Destination: "/x", Options: []string{"rslave"}}, "mounts[0].options[0]"},
		{specs.Mount{Type: "bind", Source: "/usr", Destination: "/x", Options: []string{"size=1M"}}, "mounts[0].options[0]"},
	} {
		pol, err := policies.Builtin("default")
		if err != nil {
			t.Fatal(err)
		}
		pol.Mounts = []specs.Mount{tc.mount}
		verr := pol.Validate()
		p, err := native.New(native.WithPolicy(pol), native.WithoutCgroups())
		if err == nil {
			p.Close()
			t.Errorf("%+v: the provider accepted it", tc.mount)
			continue
		}
		var fe *policies.FieldError
		if !errors.As(err, &fe) || fe.Path != tc.path || verr == nil {
			t.Errorf("%+v: got %v (validate: %v), want a FieldError at %s", tc.mount, err, verr, tc.path)
		}
	}
}

// A property test: for random mount lists the validator accepts, the
// mount table inside (/proc/self/mountinfo) has each mount exactly as the
// policy says: a bind shows its source's device and directory, a tmpfs is
// a tmpfs of its size, inode cap and mode, and ro, noexec, nosuid and nodev
// are what was asked (nosuid and nodev always). Refused lists must be
// refused by the provider too. The seed is logged; MOAT_MOUNT_SEED replays.
func TestPolicyMountTableProperty(t *testing.T) {
	if os.Geteuid() == 0 && !testenv.ReRun() {
		t.Run("root", testMountTableProperty)
		testenv.RunAsUser(t, testenv.NobodyUID, testenv.NobodyGID)
		return
	}
	testMountTableProperty(t)
}

func testMountTableProperty(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s, err := strconv.ParseUint(os.Getenv("MOAT_MOUNT_SEED"), 10, 64); err == nil {
		seed = s
	}
	t.Logf("seed %d (MOAT_MOUNT_SEED=%d replays it)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	srcBase := t.TempDir()
	os.Chmod(srcBase, 0o755)
	accepted := 0
	for i := 0; accepted < 6 && i < 40; i++ {
		ms := randomMounts(t, rng, srcBase, i)
		pol, err := policies.Builtin("default")
		if err != nil {
			t.Fatal(err)
		}
		pol.Mounts = ms
		if err := pol.Validate(); err != nil {
			if p, nerr := native.New(native.WithPolicy(pol), native.WithoutCgroups()); nerr == nil {
				p.Close()
				t.Fatalf("the validator refused %+v (%v) but the provider accepted it", ms, err)
			}
			continue
		}
		accepted++
		out, err := runPolicy(t, pol, "cat /proc/self/mountinfo")
		if err != nil {
			t.Fatalf("mounts %+v: %v", ms, err)
		}
		checkMountTable(t, ms, out)
	}
	if accepted == 0 {
		t.Fatal("no generated mount list was accepted; the generator is broken")
	}
}

// randomMounts makes 1 to 3 mounts, mostly valid, sometimes not.
func randomMounts(t *testing.T, rng *rand.Rand, base string, n int) []specs.Mount {
	pick := func(opts ...string) []string {
		var out []string
		for _, o := range opts {
			if rng.IntN(3) == 0 {
				out = append(out, o)
			}
		}
		return out
	}
	var ms []specs.Mount
	for j := range 1 + rng.IntN(3) {
		dest := fmt.Sprintf("/m%d", j)
		if rng.IntN(4) == 0 {
			dest = fmt.Sprintf("/tmp/m%d", j)
		}
		if rng.IntN(2) == 0 {
			src := filepath.Join(base, fmt.Sprintf("src-%d-%d", n, j))
			os.Mkdir(src, 0o755)
			os.WriteFile(filepath.Join(src, "mark"), []byte(src), 0o644)
			opts := pick("ro", "rw", "rbind", "bind", "nosuid", "nodev", "noexec", "private", "rprivate")
			if rng.IntN(8) == 0 {
				opts = append(opts, []string{"slave", "size=1M", "mode=0700"}[rng.IntN(3)]) // refused
			}
			rng.Shuffle(len(opts), func(a, b int) { opts[a], opts[b] = opts[b], opts[a] })
			ms = append(ms, specs.Mount{Type: []string{"", "bind"}[rng.IntN(2)], Source: src, Destination: dest, Options: opts})
			continue
		}
		opts := pick("ro", "rw", "nosuid", "nodev", "noexec", "private")
		if rng.IntN(2) == 0 {
			opts = append(opts, []string{"size=1M", "size=256k", fmt.Sprintf("size=%d", 4096*(1+rng.IntN(64))), "size=0"}[rng.IntN(4)])
		}
		if rng.IntN(2) == 0 {
			opts = append(opts, fmt.Sprintf("nr_inodes=%d", 1+rng.IntN(5000)))
		}
		if rng.IntN(2) == 0 {
			opts = append(opts, []string{"mode=0700", "mode=755", "mode=1777", "mode=0750"}[rng.IntN(4)])
		}
		if rng.IntN(10) == 0 {
			opts = append(opts, "bind") // refused on a tmpfs
		}
		rng.Shuffle(len(opts), func(a, b int) { opts[a], opts[b] = opts[b], opts[a] })
		ms = append(ms, specs.Mount{Type: "tmpfs", Destination: dest, Options: opts})
	}
	return ms
}

type mountLine struct {
	devMajor, devMinor uint32
	root, point        string
	opts               []string
	fstype             string
	super              map[string]string
}

func parseMountinfo(t *testing.T, text string) []mountLine {
	var out []mountLine
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if !ok || len(f) < 6 || len(g) < 3 {
			t.Fatalf("mountinfo line %q", line)
		}
		var ma, mi uint32
		fmt.Sscanf(f[2], "%d:%d", &ma, &mi)
		super := map[string]string{}
		for _, kv := range strings.Split(g[2], ",") {
			k, v, _ := strings.Cut(kv, "=")
			super[k] = v
		}
		out = append(out, mountLine{ma, mi, f[3], f[4], strings.Split(f[5], ","), g[0], super})
	}
	return out
}

func checkMountTable(t *testing.T, ms []specs.Mount, info string) {
	t.Helper()
	lines := parseMountinfo(t, info)
	for _, m := range ms {
		var got *mountLine
		for i := range lines {
			if lines[i].point == m.Destination {
				got = &lines[i] // the last one is on top
			}
		}
		if got == nil {
			t.Fatalf("%+v: no mount at %s inside:\n%s", m, m.Destination, info)
		}
		has := func(o string) bool { return slices.Contains(m.Options, o) }
		wantRO := has("ro") || (m.Type != "tmpfs" && !has("rw"))
		if slices.Contains(got.opts, "ro") != wantRO {
			t.Errorf("%+v: mount options %v, want ro=%v", m, got.opts, wantRO)
		}
		for _, o := range []string{"nosuid", "nodev"} {
			if !slices.Contains(got.opts, o) {
				t.Errorf("%+v: mount options %v lack %s", m, got.opts, o)
			}
		}
		if slices.Contains(got.opts, "noexec") != has("noexec") {
			t.Errorf("%+v: mount options %v, want noexec=%v", m, got.opts, has("noexec"))
		}
		if m.Type == "tmpfs" {
			if got.fstype != "tmpfs" || got.root != "/" {
				t.Errorf("%+v: %s is %s (root %s), want a fresh tmpfs", m, m.Destination, got.fstype, got.root)
			}
			wantSize, wantInodes, wantMode := int64(64<<20), "", ""
			for _, o := range m.Options {
				k, v, _ := strings.Cut(o, "=")
				switch k {
				case "size":
					wantSize, _ = policies.Size(v).Bytes()
				case "nr_inodes":
					wantInodes = v
				case "mode":
					n, _ := strconv.ParseUint(v, 8, 32)
					if n != 0o1777 { // the kernel does not show its default
						wantMode = fmt.Sprintf("%03o", n)
					}
				}
			}
			if got.super["size"] != fmt.Sprintf("%dk", (wantSize+4095)/4096*4) {
				t.Errorf("%+v: tmpfs size %q, want %d bytes", m, got.super["size"], wantSize)
			}
			if got.super["nr_inodes"] != wantInodes {
				t.Errorf("%+v: tmpfs nr_inodes %q, want %q", m, got.super["nr_inodes"], wantInodes)
			}
			if got.super["mode"] != wantMode {
				t.Errorf("%+v: tmpfs mode %q, want %q", m, got.super["mode"], wantMode)
			}
			continue
		}
		var st unix.Stat_t
		if err := unix.Stat(m.Source, &st); err != nil {
			t.Fatal(err)
		}
		if got.devMajor != unix.Major(st.Dev) || got.devMinor != unix.Minor(st.Dev) ||
			!strings.HasSuffix(m.Source, got.root) || got.root == "/" && m.Source != "/" {
			t.Errorf("%+v: %s is %d:%d %s (%s), want a bind of %s", m, m.Destination, got.devMajor, got.devMinor, got.root, got.fstype, m.Source)
		}
	}
}

// Issue 32: a policy's read-only bind of the caller's 0700 directory is
// readable to the tool as root (an id-mapped mount of its owner onto the
// sandbox's host id, nsexec.WithOwnerMappedBinds) as it is rootless (the
// tool is the caller), and read-only either way; the same directory bound
// writable as root stays a plain bind the tool cannot enter (through an
// owner-mapped one it would write as the caller). The host directory keeps
// its mode.
func TestPolicyReadOnlyBindOfPrivateDirectory(t *testing.T) {
	if os.Geteuid() == 0 && !testenv.ReRun() {
		t.Run("root", testReadOnlyPrivateBind)
		testenv.RunAsUser(t, testenv.NobodyUID, testenv.NobodyGID)
		return
	}
	testReadOnlyPrivateBind(t)
}

func testReadOnlyPrivateBind(t *testing.T) {
	dir := t.TempDir()
	os.Chmod(dir, 0o700) // mkdtemp's mode; t.TempDir's own is 0755
	if os.Geteuid() == 0 {
		testenv.RequireIDMappedMounts(t, dir)
	}
	os.WriteFile(filepath.Join(dir, "config"), []byte("visible\n"), 0o600)
	probe := "cat /data/config 2>/dev/null || echo read-refused; touch /data/new 2>/dev/null && echo wrote || echo write-refused"
	doc := func(mode string) string {
		return fmt.Sprintf(`{"extends":"default","mounts":[{"type":"bind","source":%q,"destination":"/data","options":[%q]}]}`, dir, mode)
	}
	out, err := runPolicy(t, parsePolicy(t, doc("ro")), probe)
	if err != nil || out != "visible\nwrite-refused\n" {
		t.Errorf("read-only bind: %q (%v), want the file read and the write refused", out, err)
	}
	if os.Geteuid() == 0 {
		if out, err := runPolicy(t, parsePolicy(t, doc("rw")), probe); err != nil || out != "read-refused\nwrite-refused\n" {
			t.Errorf("writable bind as root: %q (%v), want a plain bind closed to the sandbox's id", out, err)
		}
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("the host directory is now %v (%v)", fi.Mode(), err)
	}
	if _, err := os.Stat(filepath.Join(dir, "new")); err == nil {
		t.Error("the tool wrote into the host directory")
	}
}
