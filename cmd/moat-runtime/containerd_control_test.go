package main

import (
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/conformance/testenv"
)

// ctrFunc runs ctr against a test's own containerd.
type ctrFunc func(args ...string) (string, string, int)

// privateContainerd is a containerd of a test's own (testenv.Containerd:
// its root, state and socket in a temporary directory), and ctr bound to
// it in namespace ns.
type privateContainerd struct {
	dir, sock, ctr, ns string
	c                  ctrFunc
}

// newContainerd starts containerd from Debian's packages with its own
// root, state and socket in a temporary directory, waits until it
// answers, and imports the test image under each of images; all of it
// goes when the test ends.
func newContainerd(t *testing.T, ns string, images ...string) *privateContainerd {
	t.Helper()
	tc := testenv.NewContainerd(t, ns)
	pc := &privateContainerd{dir: tc.Dir, sock: tc.Sock, ctr: tc.Ctr, ns: ns}
	pc.c = func(args ...string) (string, string, int) { return tc.Command(t, args...) }
	for _, image := range images {
		tc.Import(t, ociArchive(t, image))
	}
	return pc
}

// startContainerd is newContainerd's ctr for image, in namespace moat-test.
func startContainerd(t *testing.T, image string) ctrFunc {
	t.Helper()
	return newContainerd(t, "moat-test", image).c
}

// TestContainerdControl: through containerd's runc shim, ctr task pause
// freezes a busy container (PAUSED, its counter stays put) and resume
// thaws it; ctr task ps lists the container's pids (the shim runs ps
// --format json); ctr task metrics reads its leaf's limits (a pids limit
// of its own, so moat makes one).
func TestContainerdControl(t *testing.T) {
	const image = "docker.io/moat/oci-test:busybox"
	c := startContainerd(t, image)
	rt := runtimeBin(t)
	vol, err := os.MkdirTemp("", "moat-ctr-vol-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(vol) })
	os.Chmod(vol, 0o777)
	if _, errs, code := c("run", "-d", "--runc-binary", rt, "--mount", "type=bind,src="+vol+",dst=/vol,options=rbind:rw",
		"--memory-limit", "67108864", image, "t-ctl", "/bin/sh", "-c",
		"i=0; while :; do i=$((i+1)); echo $i > /vol/count.new; mv /vol/count.new /vol/count; done"); code != 0 {
		t.Fatalf("ctr run -d: exit %d: %s", code, errs)
	}
	defer func() {
		c("task", "resume", "t-ctl")
		c("task", "kill", "-s", "KILL", "t-ctl")
		for i := 0; i < 50; i++ {
			if _, _, code := c("task", "delete", "t-ctl"); code == 0 {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		c("container", "delete", "t-ctl")
	}()
	if !counts(t, vol, 0) {
		t.Fatal("the counter does not count")
	}
	if _, errs, code := c("task", "pause", "t-ctl"); code != 0 {
		t.Fatalf("ctr task pause: exit %d: %s", code, errs)
	}
	if out, _, _ := c("task", "ls"); !strings.Contains(out, "PAUSED") {
		t.Errorf("ctr task ls after pause:\n%s", out)
	}
	n := count(t, vol)
	time.Sleep(500 * time.Millisecond)
	if m := count(t, vol); m != n {
		t.Fatalf("a paused task counted from %d to %d", n, m)
	}
	if _, errs, code := c("task", "resume", "t-ctl"); code != 0 {
		t.Fatalf("ctr task resume: exit %d: %s", code, errs)
	}
	if !counts(t, vol, n) {
		t.Fatal("the resumed task does not count")
	}
	out, errs, code := c("task", "ps", "t-ctl")
	t.Logf("ctr task ps:\n%s", out)
	pidOut, _, _ := c("task", "ls")
	var initPid int
	for _, l := range strings.Split(pidOut, "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "t-ctl" {
			initPid, _ = strconv.Atoi(f[1])
		}
	}
	if code != 0 || initPid == 0 || !strings.Contains(out, strconv.Itoa(initPid)) || strings.Count(strings.TrimSpace(out), "\n") < 2 {
		t.Errorf("ctr task ps: exit %d: %q %s (init %d)", code, out, errs, initPid)
	}
	out, errs, code = c("task", "metrics", "--format", "json", "t-ctl")
	t.Logf("ctr task metrics: %.300s", out)
	var m struct {
		Memory struct {
			Usage struct {
				Limit uint64 `json:"limit"`
				Usage uint64 `json:"usage"`
			} `json:"usage"`
		} `json:"memory"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &m) != nil || m.Memory.Usage.Limit != 67108864 || m.Memory.Usage.Usage == 0 {
		t.Errorf("ctr task metrics: exit %d: %q %s", code, out, errs)
	}
}
