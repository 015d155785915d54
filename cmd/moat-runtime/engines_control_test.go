package main

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/conformance/testenv"
)

// TestPodmanControl: podman pause stops a container's busy loop (its
// counter in a volume stays put) and shows it Paused, unpause lets it
// count again; podman top lists its processes; podman update moves its
// memory and CPU limits, seen by the container (100 MB fits in its tmpfs
// only once memory is raised from 64 MiB) and in its leaf; rm -f ends a
// paused container.
func TestPodmanControl(t *testing.T) {
	testenv.RequireRoot(t)
	p := &podman{t: t, bin: needPodman(t)}
	p.importImage()
	vol, err := os.MkdirTemp("", "moat-oci-vol-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(vol) })
	os.Chmod(vol, 0o777)
	name := p.name(t)
	args := append(append([]string{"run", "-d", "--name", name, "--memory", "64m", "-v", vol + ":/vol", "--tmpfs", "/work:size=512m"}, runFlags()...),
		testImage, "/bin/sh", "-c", "i=0; while :; do i=$((i+1)); echo $i > /vol/count.new; mv /vol/count.new /vol/count; done")
	if _, errs, code := p.run(args...); code != 0 {
		t.Fatalf("run -d: exit %d: %s", code, errs)
	}
	if !counts(t, vol, 0) {
		t.Fatal("the counter does not count")
	}
	if _, errs, code := p.run("pause", name); code != 0 {
		t.Fatalf("podman pause: exit %d: %s", code, errs)
	}
	if out, _, _ := p.run("inspect", name, "--format", "{{.State.Status}}"); strings.TrimSpace(out) != "paused" {
		t.Errorf("podman inspect after pause: %q", out)
	}
	n := count(t, vol)
	time.Sleep(500 * time.Millisecond)
	if m := count(t, vol); m != n {
		t.Fatalf("a paused container counted from %d to %d", n, m)
	}
	if _, errs, code := p.run("unpause", name); code != 0 {
		t.Fatalf("podman unpause: exit %d: %s", code, errs)
	}
	if !counts(t, vol, n) {
		t.Fatal("the unpaused container does not count")
	}
	out, errs, code := p.run("top", name)
	if code != 0 || !strings.Contains(out, "while :") {
		t.Errorf("podman top: exit %d: %q %s", code, out, errs)
	}
	if _, errs, code := p.run("update", "--memory", "256m", "--cpus", "0.5", name); code != 0 {
		t.Fatalf("podman update: exit %d: %s", code, errs)
	}
	pidOut, _, _ := p.run("inspect", name, "--format", "{{.State.Pid}}")
	pid, _ := strconv.Atoi(strings.TrimSpace(pidOut))
	if got := limitOf(t, pid, "memory"); got != "268435456" {
		t.Errorf("after podman update --memory 256m the leaf's limit is %s", got)
	}
	if got := limitOf(t, pid, "cpu"); got != "50000 100000" {
		t.Errorf("after podman update --cpus 0.5 the leaf's quota/period is %s", got)
	}
	out, errs, code = p.run("exec", name, "/bin/sh", "-c", "head -c 100000000 /dev/zero > /work/x && echo ok")
	if code != 0 || out != "ok\n" {
		t.Fatalf("100 MB after podman update --memory 256m: exit %d: %q %s", code, out, errs)
	}
	if _, errs, code := p.run("pause", name); code != 0 {
		t.Fatalf("podman pause: exit %d: %s", code, errs)
	}
	if _, errs, code := p.run("rm", "-f", name); code != 0 {
		t.Fatalf("podman rm -f of a paused container: exit %d: %s", code, errs)
	}
	deadline := time.Now().Add(10 * time.Second)
	for present("/proc/"+strconv.Itoa(pid)) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if present("/proc/" + strconv.Itoa(pid)) {
		t.Fatalf("the paused container's init %d outlived rm -f", pid)
	}
}
