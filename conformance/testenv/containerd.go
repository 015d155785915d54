package testenv

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// Containerd is a containerd of a test's own (its root, state and socket
// in a temporary directory, gone when the test ends) and the default
// `ctr run` container recipe for the tests of moat inside a container
// (issue 31): containerd's runc shim, ctr's default spec (its masked and
// read-only /proc paths, its default capabilities, no_new_privs, a network
// namespace with only lo), the offline busybox image of NewPodman as an
// OCI archive, and Dirs bound read-only at the same path. Seccomp is
// ctr's default too: none, unless a test passes --seccomp (containerd's
// default profile). cmd/moat-runtime's engine tests use the instance
// alone, with moat-runtime as ctr's runc binary.
type Containerd struct {
	Dir  string   // the instance's directory: config, log, root, state
	Sock string   // its gRPC socket
	Ctr  string   // the ctr binary
	NS   string   // the containerd namespace the test's containers are in
	Dirs []string // host directories bound read-only at the same path

	seq atomic.Int64 // names the containers Run makes
}

// NewContainerd starts containerd from Debian's packages as described on
// Containerd, in namespace ns, and waits until it answers. It skips (see
// Skipf) without root, containerd or ctr.
func NewContainerd(t *testing.T, ns string) *Containerd {
	t.Helper()
	RequireRoot(t)
	ctrd, err1 := exec.LookPath("containerd")
	ctr, err2 := exec.LookPath("ctr")
	if err1 != nil || err2 != nil {
		Skipf(t, "containerd and ctr are not installed (Debian: apt-get install containerd)")
	}
	dir, err := os.MkdirTemp("", "moat-containerd-")
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "containerd.sock")
	conf := fmt.Sprintf("version = 2\nroot = %q\nstate = %q\ndisabled_plugins = [\"io.containerd.grpc.v1.cri\"]\n[grpc]\n  address = %q\n[ttrpc]\n  address = %q\n",
		filepath.Join(dir, "root"), filepath.Join(dir, "state"), sock, sock+".ttrpc")
	if err := os.WriteFile(filepath.Join(dir, "config.toml"), []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(dir, "containerd.log"))
	if err != nil {
		t.Fatal(err)
	}
	d := exec.Command(ctrd, "--config", filepath.Join(dir, "config.toml"))
	d.Stdout, d.Stderr = logf, logf
	if err := d.Start(); err != nil {
		t.Fatalf("start containerd: %v", err)
	}
	t.Cleanup(func() {
		d.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { d.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			d.Process.Kill()
			<-done
		}
		logf.Close()
		// The snapshots are overlay mounts below root: unmount what is left.
		exec.Command("sh", "-c", "grep -o '"+dir+"[^ ]*' /proc/self/mounts | sort -r | xargs -r -n1 umount -l").Run()
		os.RemoveAll(dir)
	})
	c := &Containerd{Dir: dir, Sock: sock, Ctr: ctr, NS: ns}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if _, _, code := c.Command(t, "version"); code == 0 {
			break
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(filepath.Join(dir, "containerd.log"))
			t.Fatalf("containerd did not answer in 20 s:\n%s", b)
		}
	}
	return c
}

// Command runs ctr with args against this containerd, in its namespace,
// with a timeout of two minutes, and returns its stdout, stderr and exit
// status.
func (c *Containerd) Command(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(c.Ctr, append([]string{"--address", c.Sock, "--namespace", c.NS}, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatalf("%v: %v", cmd.Args, err)
	}
	timer := time.AfterFunc(2*time.Minute, func() { cmd.Process.Kill() })
	err := cmd.Wait()
	timer.Stop()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%v: %v", cmd.Args, err)
	}
	return out.String(), errb.String(), code
}

// Import imports an OCI image archive (OCIArchive).
func (c *Containerd) Import(t *testing.T, archive []byte) {
	t.Helper()
	path := filepath.Join(c.Dir, "image.oci.tar")
	if err := os.WriteFile(path, archive, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, errs, code := c.Command(t, "images", "import", path); code != 0 {
		t.Fatalf("ctr images import: exit %d: %s", code, errs)
	}
}

// ImportBusybox imports NewPodman's offline image (Debian's static
// busybox and links to it for commands) as image name, run as user ("" for
// the image's root: ctr run has no --user, so an image's USER is how a
// container runs as another). It skips (see Skipf) without a static
// busybox.
func (c *Containerd) ImportBusybox(t *testing.T, name, user string, commands ...string) {
	t.Helper()
	c.Import(t, OCIArchive(name, busyboxImage(t, staticBusybox(t), commands), OCIConfig{User: user}))
}

// TempDir is a directory the containers' users can read (a test's
// TempDir is below a 0700 one), removed when t ends.
func (c *Containerd) TempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "moat-ctr-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	return dir
}

// Run runs argv in a fresh container of image (ctr run --rm, on runc;
// flags are ctr run's own, such as --seccomp) and returns its stdout,
// stderr and exit status. It skips (see Skipf) without runc.
func (c *Containerd) Run(t *testing.T, image string, flags []string, argv ...string) (string, string, int) {
	t.Helper()
	if _, err := exec.LookPath("runc"); err != nil {
		Skipf(t, "runc is not installed (Debian: apt-get install runc)")
	}
	args := []string{"run", "--rm"}
	for _, d := range c.Dirs {
		args = append(args, "--mount", "type=bind,src="+d+",dst="+d+",options=rbind:ro")
	}
	id := fmt.Sprintf("moat-%d-%d", os.Getpid(), c.seq.Add(1))
	return c.Command(t, append(append(append(args, flags...), image, id), argv...)...)
}

// OCIConfig is what an image's config says of how its containers run.
type OCIConfig struct {
	User string   // USER, "" for root
	Env  []string // nil for a PATH of the usual directories
}

// OCIArchive is an OCI image archive, as ctr images import reads it, of
// one uncompressed layer (a root as a tar) named name, with /bin/sh as
// its command.
func OCIArchive(name string, layer []byte, oc OCIConfig) []byte {
	digest := func(b []byte) string { s := sha256.Sum256(b); return "sha256:" + hex.EncodeToString(s[:]) }
	if oc.Env == nil {
		oc.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	}
	cfg := map[string]any{"Env": oc.Env, "Cmd": []string{"/bin/sh"}}
	if oc.User != "" {
		cfg["User"] = oc.User
	}
	config, _ := json.Marshal(map[string]any{
		"architecture": goruntime.GOARCH, "os": "linux", "config": cfg,
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{digest(layer)}},
	})
	manifest, _ := json.Marshal(map[string]any{
		"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
		"config": map[string]any{"mediaType": "application/vnd.oci.image.config.v1+json", "digest": digest(config), "size": len(config)},
		"layers": []any{map[string]any{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": digest(layer), "size": len(layer)}},
	})
	ref := name[strings.LastIndex(name, ":")+1:]
	index, _ := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"manifests": []any{map[string]any{"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": digest(manifest), "size": len(manifest),
			"annotations": map[string]string{"io.containerd.image.name": name, "org.opencontainers.image.ref.name": ref}}},
	})
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	add := func(n string, b []byte) {
		tw.WriteHeader(&tar.Header{Name: n, Mode: 0o644, Size: int64(len(b)), Typeflag: tar.TypeReg})
		tw.Write(b)
	}
	add("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`))
	add("index.json", index)
	for _, b := range [][]byte{config, manifest, layer} {
		add("blobs/sha256/"+strings.TrimPrefix(digest(b), "sha256:"), b)
	}
	tw.Close()
	return buf.Bytes()
}
