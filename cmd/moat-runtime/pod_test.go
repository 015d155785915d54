package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/conformance/testenv"
	"github.com/moat-sandbox/moat/nsexec"
)

// nsKinds are the namespaces a podman pod shares by default (--share
// ipc,net,uts), each read as /proc/PID/ns/KIND's link.
var nsKinds = []string{"net", "ipc", "uts"}

// nsScript prints the caller's links for nsKinds, one a line.
const nsScript = "for n in net ipc uts; do readlink /proc/self/ns/$n; done"

// hostNS is this process's link for each of nsKinds: the host's.
func hostNS(t *testing.T) map[string]string {
	t.Helper()
	return pidNS(t, os.Getpid())
}

// pidNS is pid's link for each of nsKinds.
func pidNS(t *testing.T, pid int) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, k := range nsKinds {
		l, err := os.Readlink(filepath.Join("/proc", strconv.Itoa(pid), "ns", k))
		if err != nil {
			t.Fatalf("namespaces of %d: %v", pid, err)
		}
		m[k] = l
	}
	return m
}

// parseNS reads nsScript's output.
func parseNS(out string) map[string]string {
	m := map[string]string{}
	for _, l := range strings.Fields(out) {
		if k, _, ok := strings.Cut(l, ":"); ok {
			m[k] = l
		}
	}
	return m
}

// pid is the pid podman gives for container id: moat's container init.
func (p *podman) pid(id string) int {
	p.t.Helper()
	out, errs, code := p.run("inspect", id, "--format", "{{.State.Pid}}")
	pid, err := strconv.Atoi(strings.TrimSpace(out))
	if code != 0 || err != nil || pid <= 0 {
		p.t.Fatalf("inspect %s: exit %d, pid %q: %s", id, code, out, errs)
	}
	return pid
}

// podConf gives p a containers.conf whose default rlimits this host
// allows: a pod's infra container (podman's pause, built from catatonit)
// takes no --ulimit, and podman's default RLIMIT_NOFILE is above root's
// hard limit on the development host (ulimits says why).
func podConf(t *testing.T, p *podman) {
	t.Helper()
	dir, err := os.MkdirTemp("", "moat-oci-conf-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	u := ulimits()
	conf := fmt.Sprintf("[containers]\ndefault_ulimits = [%q, %q]\n", u[1], u[3])
	f := filepath.Join(dir, "containers.conf")
	if err := os.WriteFile(f, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	if p.env == nil {
		p.env = os.Environ()
	}
	p.env = append(p.env, "CONTAINERS_CONF="+f)
}

// podChecks: `podman pod create` and two containers in it on moat-runtime.
// Both are in the pod's net, ipc and uts namespaces (the infra
// container's, none of them the host's), a file one writes in the pod's
// /dev/shm (POSIX shared memory, shared with the ipc namespace) is the
// other's to read, and, where the pod has a network with lo up (podman's
// default as root), a listener on 127.0.0.1 in one is reached from the
// other. pod rm -f then ends every process and leaves no container.
func podChecks(t *testing.T, p *podman, podFlags []string, loopback bool) {
	podConf(t, p)
	p.importImage()
	pod := fmt.Sprintf("moat-oci-pod-%d", os.Getpid())
	t.Cleanup(func() { p.run("pod", "rm", "-f", pod) })
	if _, errs, code := p.run(append([]string{"pod", "create", "--name", pod}, podFlags...)...); code != 0 {
		t.Fatalf("pod create: exit %d: %s", code, errs)
	}
	// A serves a page from the pod's /dev/shm (the image's /tmp is host
	// root's as root, not the container's to write).
	a := p.name(t)
	serve := "echo shm-a > /dev/shm/from-a && mkdir /dev/shm/www && echo net-a > /dev/shm/www/index.html && exec busybox httpd -f -p 127.0.0.1:8080 -h /dev/shm/www"
	if _, errs, code := p.run(append(append([]string{"run", "-d", "--pod", pod, "--name", a}, ulimits()...), testImage, "/bin/sh", "-c", serve)...); code != 0 {
		t.Fatalf("run -d --pod: exit %d: %s", code, errs)
	}
	infraOut, errs, code := p.run("pod", "inspect", pod, "--format", "{{.InfraContainerID}}")
	if code != 0 {
		t.Fatalf("pod inspect: exit %d: %s", code, errs)
	}
	infraPid, aPid := p.pid(strings.TrimSpace(infraOut)), p.pid(a)
	infra, host := pidNS(t, infraPid), hostNS(t)
	for _, k := range nsKinds {
		if infra[k] == host[k] {
			t.Fatalf("the pod's %s namespace is the host's (%s)", k, host[k])
		}
	}
	if got := pidNS(t, aPid); fmt.Sprint(got) != fmt.Sprint(infra) {
		t.Errorf("container A (pid %d) is in %v, want the pod's %v", aPid, got, infra)
	}
	// B, in the same pod: its own view of the namespaces, A's file, and
	// A's listener (polled: A may not be listening yet).
	script := nsScript + "; for i in $(seq 100); do cat /dev/shm/from-a 2>/dev/null && break; sleep 0.1; done"
	if loopback {
		script += "; for i in $(seq 100); do busybox wget -q -O - http://127.0.0.1:8080/index.html 2>/dev/null && break; sleep 0.1; done"
	}
	out, errs, code := p.run(append(append([]string{"run", "--rm", "--pod", pod, "--name", p.name(t)}, ulimits()...), testImage, "/bin/sh", "-c", script)...)
	if code != 0 {
		t.Fatalf("the pod's second container: exit %d, output %q: %s", code, out, errs)
	}
	if got := parseNS(out); fmt.Sprint(got) != fmt.Sprint(infra) {
		t.Errorf("container B is in %v, want the pod's %v", got, infra)
	}
	if !strings.Contains(out, "shm-a\n") {
		t.Errorf("container B: output %q, want A's /dev/shm/from-a (shm-a)", out)
	}
	if loopback && !strings.Contains(out, "net-a\n") {
		t.Errorf("container B: output %q, want A's page on 127.0.0.1:8080 (net-a)", out)
	}
	if _, errs, code := p.run("pod", "rm", "-f", pod); code != 0 {
		t.Fatalf("pod rm -f: exit %d: %s", code, errs)
	}
	if _, _, code := p.run("pod", "exists", pod); code == 0 {
		t.Errorf("podman still has the pod %s after pod rm -f", pod)
	}
	if out, _, _ := p.run("ps", "-a", "--format", "{{.Names}}"); strings.Contains(out, a) {
		t.Errorf("podman still lists %s after pod rm -f: %q", a, out)
	}
	for _, pid := range []int{infraPid, aPid} {
		if !gone(pid, 10*time.Second) {
			t.Errorf("the pod's process %d outlived pod rm -f", pid)
		}
	}
}

// TestPodmanPod: a pod as root, on podman's default network (a namespace
// podman configured, lo up).
func TestPodmanPod(t *testing.T) {
	testenv.RequireRoot(t)
	podChecks(t, &podman{t: t, bin: needPodman(t)}, nil, true)
}

// TestPodmanPodRootless: a pod of rootless podman, with --network none
// (its default network needs slirp4netns or pasta, which CI does not
// install): the pod's network namespace is the one moat makes for the
// infra container, lo down, so only the ipc and uts sharing is exercised
// beyond the namespaces' identity.
func TestPodmanPodRootless(t *testing.T) {
	podChecks(t, rootlessPodman(t), []string{"--network", "none"}, false)
}

// networkContainerChecks: `run --network container:X` puts the new
// container in X's network namespace, every time (the issue saw it
// refused 6 of 7 tries as the host's namespace when the engine's pid was
// moat's monitor, which is in the host's).
func networkContainerChecks(t *testing.T, p *podman) {
	p.importImage()
	x := p.name(t)
	if _, errs, code := p.run(append(append([]string{"run", "-d", "--name", x}, runFlags()...), testImage, "sleep", "100")...); code != 0 {
		t.Fatalf("run -d: exit %d: %s", code, errs)
	}
	want := pidNS(t, p.pid(x))["net"]
	if want == hostNS(t)["net"] {
		t.Fatalf("%s's network namespace is the host's (%s)", x, want)
	}
	for i := 0; i < 5; i++ {
		out, errs, code := p.run(append(append([]string{"run", "--rm", "--network", "container:" + x}, ulimits()...), testImage, "readlink", "/proc/self/ns/net")...)
		if got := strings.TrimSpace(out); code != 0 || got != want {
			t.Fatalf("try %d of 5: --network container:%s: exit %d, namespace %q, want %s's %s: %s", i+1, x, code, got, x, want, errs)
		}
	}
}

// TestPodmanNetworkContainer: --network container:X as root.
func TestPodmanNetworkContainer(t *testing.T) {
	testenv.RequireRoot(t)
	networkContainerChecks(t, &podman{t: t, bin: needPodman(t)})
}

// TestPodmanNetworkContainerRootless: the same under rootless podman.
func TestPodmanNetworkContainerRootless(t *testing.T) {
	networkContainerChecks(t, rootlessPodman(t))
}

// TestPodmanPodUserNamespace: a pod is one user namespace (issue 29, item
// 2). As root, podman's infra container, two containers of the pod and a
// `podman exec` in one of them are all in the infra container's user
// namespace, which is not the host's, and its root is the pod's: B may
// set the hostname of the pod's uts namespace (with CAP_SYS_ADMIN, which
// in a user namespace of its own would not reach the pod's), and A sees
// it; the pod's mqueue and sysfs (of its ipc and network namespaces,
// which the pod's user namespace owns) are mounted in B as podman asks,
// which in a user namespace of its own the kernel would refuse. A build
// without cgo keeps a user namespace per container (podrange.go), which
// the test then checks instead.
func TestPodmanPodUserNamespace(t *testing.T) {
	testenv.RequireRoot(t)
	p := &podman{t: t, bin: needPodman(t)}
	podConf(t, p)
	p.importImage()
	pod := fmt.Sprintf("moat-oci-userpod-%d", os.Getpid())
	t.Cleanup(func() { p.run("pod", "rm", "-f", pod) })
	if _, errs, code := p.run("pod", "create", "--name", pod, "--network", "none"); code != 0 {
		t.Fatalf("pod create: exit %d: %s", code, errs)
	}
	a, b := p.name(t), p.name(t)
	for _, n := range []string{a, b} {
		if _, errs, code := p.run(append(append([]string{"run", "-d", "--pod", pod, "--name", n, "--cap-add", "SYS_ADMIN"}, ulimits()...), testImage, "sleep", "1000")...); code != 0 {
			t.Fatalf("run -d --pod %s: exit %d: %s", n, code, errs)
		}
	}
	infraOut, errs, code := p.run("pod", "inspect", pod, "--format", "{{.InfraContainerID}}")
	if code != 0 {
		t.Fatalf("pod inspect: exit %d: %s", code, errs)
	}
	userOf := func(pid int) string {
		l, err := os.Readlink(filepath.Join("/proc", strconv.Itoa(pid), "ns", "user"))
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	infra, host := userOf(p.pid(strings.TrimSpace(infraOut))), userOf(os.Getpid())
	if infra == host {
		t.Fatalf("the pod's user namespace is the host's (%s)", host)
	}
	out, errs, code := p.run("exec", b, "/bin/sh", "-c", "readlink /proc/self/ns/user; hostname shared-by-b && echo set; grep -c -E ' /dev/mqueue mqueue | /sys sysfs ' /proc/self/mounts")
	f := strings.Fields(out)
	if code != 0 || len(f) < 1 {
		t.Fatalf("exec in %s: exit %d, output %q: %s", b, code, out, errs)
	}
	if !nsexec.UserJoinSupported() {
		for _, n := range []string{a, b} {
			if userOf(p.pid(n)) == infra {
				t.Errorf("without cgo, container %s is in the pod's user namespace; want one of its own", n)
			}
		}
		return
	}
	for n, got := range map[string]string{"A": userOf(p.pid(a)), "B": userOf(p.pid(b)), "exec in B": f[0]} {
		if got != infra {
			t.Errorf("%s is in user namespace %s, want the pod's %s", n, got, infra)
		}
	}
	if len(f) != 3 || f[1] != "set" || f[2] != "2" {
		t.Fatalf("exec in %s: output %q: %s; want the pod's hostname set by its root, and the pod's mqueue and sysfs mounted", b, out, errs)
	}
	if out, errs, code := p.run("exec", a, "hostname"); code != 0 || strings.TrimSpace(out) != "shared-by-b" {
		t.Errorf("the hostname A sees: exit %d, %q: %s; want B's shared-by-b", code, out, errs)
	}
}
