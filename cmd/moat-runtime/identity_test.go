package main

import (
	"archive/tar"
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/moat-sandbox/moat/conformance/testenv"
	"github.com/moat-sandbox/moat/nsexec"
)

// capField is the capability set /proc/self/status printed for key in
// out, or 0.
func capField(out, key string) uint64 {
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(line, key+":"); ok {
			n, _ := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return n
		}
	}
	return 0
}

// checkIdentity reads what the identity subtest printed (id -u, the
// uid_map, CapEff, CapBnd, NoNewPrivs): uid 0 inside, a range of ids
// (as root a block of moat's range space of the container's own; in
// rootless podman's namespace every id it has, each to itself), the
// capabilities podman grants and no more than its bounding set, none of
// CAP_SYS_ADMIN, and no_new_privs.
func checkIdentity(t *testing.T, out string, root bool) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) < 5 || lines[0] != "0" {
		t.Fatalf("inside: %q, want uid 0, the uid map and the status lines", out)
	}
	var maps [][3]uint64
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		if len(f) != 3 {
			break
		}
		var m [3]uint64
		for i := range f {
			m[i], _ = strconv.ParseUint(f[i], 10, 32)
		}
		maps = append(maps, m)
	}
	total := uint64(0)
	for _, m := range maps {
		total += m[2]
		if root && (m[1] == 0 || m[1] < nsexec.HostRangeFirst || m[1]%nsexec.HostRangeSize != 0 || m[0] != 0 || m[2] != nsexec.HostRangeSize) {
			t.Errorf("as root the map line %v is not a block of moat's range space mapped from 0", m)
		}
		if !root && m[0] != m[1] {
			t.Errorf("in rootless podman's namespace the map line %v does not map its ids to themselves", m)
		}
	}
	if total <= 1 {
		t.Errorf("the uid map %v maps one id; want a range", maps)
	}
	eff, bnd := capField(out, "CapEff"), capField(out, "CapBnd")
	if eff == 0 || eff&^bnd != 0 || eff&(1<<21) != 0 || !strings.Contains(out, "NoNewPrivs:\t1") {
		t.Errorf("inside: CapEff %x CapBnd %x in %q, want podman's default set (not CAP_SYS_ADMIN) within the bounding set, and no_new_privs", eff, bnd, out)
	}
}

// multiuserImage is an image of several users: the test image's busybox,
// an Alpine-style /etc/group that lists root in other groups, a user app
// (1000) whose home and secret are its own, a service user svc (1001),
// and /data of group data (2000) readable by that group only.
const multiuserImage = "localhost/moat-oci-test:multiuser"

func multiuserTar(t *testing.T) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	add := func(h *tar.Header, body []byte) {
		h.Size = int64(len(body))
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		tw.Write(body)
	}
	dir := func(name string, mode int64, uid, gid int) {
		add(&tar.Header{Name: name + "/", Typeflag: tar.TypeDir, Mode: mode, Uid: uid, Gid: gid}, nil)
	}
	file := func(name, body string, mode int64, uid, gid int) {
		add(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: mode, Uid: uid, Gid: gid}, []byte(body))
	}
	for _, d := range []string{"bin", "etc", "proc", "dev", "sys", "tmp", "run", "mnt", "home"} {
		dir(d, 0o755, 0, 0)
	}
	bb, err := os.ReadFile(filepath.Join(testRootfs(t), "bin", "busybox"))
	if err != nil {
		t.Fatal(err)
	}
	add(&tar.Header{Name: "bin/busybox", Typeflag: tar.TypeReg, Mode: 0o755}, bb)
	for _, c := range busyboxCommands {
		add(&tar.Header{Name: "bin/" + c, Typeflag: tar.TypeSymlink, Linkname: "busybox", Mode: 0o777}, nil)
	}
	file("etc/passwd", "root:x:0:0:root:/root:/bin/sh\napp:x:1000:1000:app:/home/app:/bin/sh\nsvc:x:1001:1001:svc:/:/bin/sh\n", 0o644, 0, 0)
	file("etc/group", "root:x:0:root\nbin:x:1:root,bin,daemon\ndaemon:x:2:root,bin,daemon\nadm:x:4:root,adm,daemon\nwheel:x:10:root\napp:x:1000:\nsvc:x:1001:\ndata:x:2000:app\n", 0o644, 0, 0)
	dir("home/app", 0o700, 1000, 1000)
	file("home/app/secret", "app's\n", 0o600, 1000, 1000)
	dir("data", 0o750, 0, 2000)
	file("data/file", "data's\n", 0o640, 0, 2000)
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// importMultiuser puts the image of several users into p's store.
func (p *podman) importMultiuser() {
	p.t.Helper()
	dir, err := os.MkdirTemp("", "moat-oci-import-")
	if err != nil {
		p.t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o755)
	f := filepath.Join(dir, "image.tar")
	if err := os.WriteFile(f, multiuserTar(p.t), 0o644); err != nil {
		p.t.Fatal(err)
	}
	if _, errs, code := p.run("import", f, multiuserImage); code != 0 {
		p.t.Fatalf("podman import: exit %d: %s", code, errs)
	}
}

// identityChecks are what an image of several users needs: --user 1000 on
// files that belong to several uids, an entrypoint that drops from root
// to another user, the groups the image's /etc/group gives root, and
// --group-add. Each run gets flags (podman as root: --userns=auto, which
// gives the image to the container's ids; moat cannot id-map podman's
// overlay root itself, README says why).
func identityChecks(t *testing.T, p *podman, flags ...string) {
	p.importMultiuser()
	run := func(extra []string, args ...string) (string, string, int) {
		all := append(append(append(append([]string{"run", "--rm"}, runFlags()...), flags...), extra...), append([]string{multiuserImage}, args...)...)
		return p.run(all...)
	}
	t.Run("user", func(t *testing.T) {
		out, errs, code := run([]string{"--user", "1000:1000"}, "/bin/sh", "-c", "id -u; id -g; cat /home/app/secret; stat -c %u:%g /home/app /bin/busybox")
		if code != 0 || out != "1000\n1000\napp's\n1000:1000\n0:0\n" {
			t.Fatalf("--user 1000:1000: exit %d, output %q, want uid 1000 owning its own files and root the rest: %s", code, out, errs)
		}
		// --user 1000 alone: podman takes the gid from the image's
		// /etc/passwd and the groups from its /etc/group (data, 2000,
		// lists app), and moat sets them all.
		out, errs, code = run([]string{"--user", "1000"}, "/bin/sh", "-c", "id -u; id -g; id -G; cat /data/file")
		if code != 0 || out != "1000\n1000\n1000 2000\ndata's\n" {
			t.Fatalf("--user 1000: exit %d, output %q, want uid and gid 1000, the group data (2000) the image's /etc/group gives app, and its file: %s", code, out, errs)
		}
	})
	t.Run("drops", func(t *testing.T) {
		// An entrypoint run as root that drops to the service user, as an
		// image's init script does (su: setgroups, setgid, setuid).
		out, errs, code := run(nil, "/bin/su", "-s", "/bin/sh", "app", "-c", "id -u; cat /home/app/secret; grep CapEff /proc/self/status")
		if code != 0 || !strings.HasPrefix(out, "1000\napp's\n") || capField(out, "CapEff") != 0 {
			t.Fatalf("su to app: exit %d, output %q, want uid 1000, its file, and no capability left: %s", code, out, errs)
		}
	})
	t.Run("groups", func(t *testing.T) {
		// podman gives root the groups the image's /etc/group lists it in.
		out, errs, code := run(nil, "/bin/sh", "-c", "id -G")
		if code != 0 || !strings.Contains(" "+out, " 10") || !strings.Contains(" "+out, " 4") {
			t.Fatalf("root's groups: exit %d, output %q, want those the image's /etc/group gives root (adm 4, wheel 10): %s", code, out, errs)
		}
		out, errs, code = run([]string{"--user", "1001:1001", "--group-add", "2000"}, "/bin/sh", "-c", "id -G; cat /data/file")
		if code != 0 || out != "1001 2000\ndata's\n" {
			t.Fatalf("--group-add 2000: exit %d, output %q, want group 2000 and its file: %s", code, out, errs)
		}
	})
}

// TestPodmanIdentity: podman as root runs an image of several users on
// moat (--userns=auto: podman's map from /etc/subuid, which moat honours),
// grants what --cap-add asks inside the user namespace only, and without
// --userns (moat's own range) writes a root-owned volume through an
// id-mapped bind.
func TestPodmanIdentity(t *testing.T) {
	testenv.RequireRoot(t)
	p := &podman{t: t, bin: needPodman(t)}
	subordinate(t, "containers", "1000000:1000000")
	identityChecks(t, p, "--userns", "auto")
	t.Run("cap-add", func(t *testing.T) {
		base, err := os.MkdirTemp("", "moat-oci-cap-")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(base)
		os.Chmod(base, 0o755)
		out, errs, code := p.run(append(append([]string{"run", "--rm", "--cap-add", "SYS_ADMIN", "-v", base + ":/vol"}, runFlags()...),
			multiuserImage, "/bin/sh", "-c", "mount -t tmpfs none /vol && echo x > /vol/in-tmpfs && echo mounted; grep CapEff /proc/self/status")...)
		if code != 0 || !strings.HasPrefix(out, "mounted\n") || capField(out, "CapEff")&(1<<21) == 0 {
			t.Fatalf("--cap-add SYS_ADMIN: exit %d, output %q, want a mount in the container's own namespace: %s", code, out, errs)
		}
		if entries, _ := os.ReadDir(base); len(entries) != 0 {
			t.Fatalf("the container's mount reached the host directory: %v", entries)
		}
	})
	t.Run("volume", func(t *testing.T) {
		base, err := os.MkdirTemp("", "moat-oci-vol-")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(base)
		os.Chmod(base, 0o755)
		out, errs, code := p.run(append(append([]string{"run", "--rm", "-v", base + ":/vol"}, runFlags()...),
			multiuserImage, "/bin/sh", "-c", "echo x > /vol/by-root && stat -c %u /vol /vol/by-root")...)
		if code != 0 || out != "0\n0\n" {
			t.Fatalf("a root-owned 0755 volume: exit %d, output %q, want container root to write it: %s", code, out, errs)
		}
		var st syscall.Stat_t
		if err := syscall.Stat(filepath.Join(base, "by-root"), &st); err != nil || st.Uid != 0 {
			t.Fatalf("on the host the file is owned by %d (%v), want root, the volume's owner", st.Uid, err)
		}
	})
	t.Run("userns-auto", func(t *testing.T) {
		out, errs, code := p.run(append(append([]string{"run", "--rm", "--userns", "auto"}, runFlags()...),
			multiuserImage, "/bin/sh", "-c", "cat /proc/self/uid_map; stat -c %u:%g /home/app")...)
		f := strings.Fields(out)
		if code != 0 || len(f) != 4 || f[0] != "0" || f[1] != "1000000" || f[3] != "1000:1000" {
			t.Fatalf("--userns=auto: exit %d, output %q, want podman's map from /etc/subuid as given: %s", code, out, errs)
		}
	})
}

// TestPodmanIdentityRootless: the same image under rootless podman, where
// moat maps every id of podman's namespace to itself.
func TestPodmanIdentityRootless(t *testing.T) {
	identityChecks(t, rootlessPodman(t))
}

// subordinate makes sure /etc/subuid and /etc/subgid delegate ids to
// user (podman --userns=auto takes its ranges from the user
// "containers"), adding "user:ids" where missing and removing it after.
func subordinate(t *testing.T, user, ids string) {
	t.Helper()
	for _, f := range []string{"/etc/subuid", "/etc/subgid"} {
		b, err := os.ReadFile(f)
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		if strings.Contains("\n"+string(b), "\n"+user+":") {
			continue
		}
		line := user + ":" + ids + "\n"
		if len(b) > 0 && !bytes.HasSuffix(b, []byte("\n")) {
			line = "\n" + line
		}
		if err := os.WriteFile(f, append(b, line...), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			now, _ := os.ReadFile(f)
			os.WriteFile(f, bytes.Replace(now, []byte(line), nil, 1), 0o644)
		})
	}
}

// ctrIdentity: ctr's default spec (no user namespace, containerd's default
// capability set) on moat: uid 0 inside is a block of moat's range, the
// default set is granted inside it (chown to another id works), and a
// root-owned 0755 host directory given with --mount is written by
// container root through an id-mapped bind, what it writes owned by host
// root on the host.
func ctrIdentity(t *testing.T, ctr func(args ...string) (string, string, int), rt, image string) {
	base, err := os.MkdirTemp("", "moat-ctr-vol-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(base)
	os.Chmod(base, 0o755)
	out, errs, code := ctr("run", "--rm", "--runc-binary", rt, "--mount", "type=bind,src="+base+",dst=/vol,options=rbind:rw", image, "t-ids", "/bin/sh", "-c",
		"cat /proc/self/uid_map; touch /tmp/x && chown 1:1 /tmp/x && echo chowned; echo x > /vol/by-root && stat -c %u /vol/by-root")
	f := strings.Fields(out)
	if code != 0 || len(f) != 5 || f[0] != "0" || f[2] != "65536" || f[3] != "chowned" || f[4] != "0" {
		t.Fatalf("ctr run: exit %d, output %q, want moat's range, chown granted and the volume written: %s", code, out, errs)
	}
	if first, _ := strconv.ParseUint(f[1], 10, 32); first < nsexec.HostRangeFirst {
		t.Errorf("uid 0 inside is host %d, not a block of moat's range space", first)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(base, "by-root"), &st); err != nil || st.Uid != 0 {
		t.Errorf("on the host the file is owned by %d (%v), want root", st.Uid, err)
	}
}
