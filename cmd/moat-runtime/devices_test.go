package main

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/conformance/testenv"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// TestDevicesBound: linux.devices are binds of the host's node of that
// number, with the host's owner and mode. Hostile: a root-only host node
// (/dev/kvm or /dev/loop0) asked with mode 0666, to a container granted
// CAP_DAC_OVERRIDE, CAP_FOWNER and CAP_SYS_ADMIN with no filter, is there
// and still cannot be opened nor chmod'ed; a device that exists (the
// host's 1:3, /dev/null, at another name) works; a number no host node
// has is refused at create, naming the field.
func TestDevicesBound(t *testing.T) {
	testenv.RequireRoot(t)
	var closed specs.LinuxDevice
	for _, p := range []string{"/dev/kvm", "/dev/loop0"} {
		var st unix.Stat_t
		if unix.Stat(p, &st) != nil || st.Mode&0o066 != 0 || st.Uid != 0 {
			continue // absent, or opened by a group or everyone here
		}
		typ := "c"
		if st.Mode&unix.S_IFMT == unix.S_IFBLK {
			typ = "b"
		}
		closed = specs.LinuxDevice{Path: p, Type: typ, Major: int64(unix.Major(st.Rdev)), Minor: int64(unix.Minor(st.Rdev))}
		break
	}
	if closed.Path == "" {
		testenv.Skipf(t, "not this layout: no root-only /dev/kvm or /dev/loop0 on this host")
	}
	mode := os.FileMode(0o666)
	zero := uint32(0)
	closed.FileMode, closed.UID, closed.GID = &mode, &zero, &zero
	_, spec := bundle(t, "/bin/sh", "-c", fmt.Sprintf(
		"test -%s %s && echo there; (echo x > %s) 2>/dev/null && echo opened; chmod 666 %s 2>/dev/null && echo chmod; "+
			"echo x > /dev/mynull && test ! -s /dev/mynull && echo null-works", closed.Type, closed.Path, closed.Path, closed.Path))
	spec.Linux.Devices = []specs.LinuxDevice{closed, {Path: "/dev/mynull", Type: "c", Major: 1, Minor: 3, FileMode: &mode}}
	caps := []string{"CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_SYS_ADMIN"}
	spec.Process.Capabilities = &specs.LinuxCapabilities{Bounding: caps, Effective: caps, Permitted: caps}
	spec.Linux.Seccomp = &specs.LinuxSeccomp{DefaultAction: specs.ActAllow}
	out, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	if _, errs, code := rtIO(t, t.TempDir(), out, "run", "--bundle", writeBundle(t, spec), "dev1"); code != 0 {
		t.Fatalf("run: exit %d: %s", code, errs)
	}
	if got, _ := os.ReadFile(out.Name()); string(got) != "there\nnull-works\n" {
		t.Errorf("the container says %q, want \"there\\nnull-works\\n\" (%s there but closed, /dev/mynull working)", got, closed.Path)
	}

	// A number no host node has: refused at create, naming the field.
	spec.Linux.Devices = []specs.LinuxDevice{{Path: "/dev/ghost", Type: "c", Major: 4095, Minor: 1048575, FileMode: &mode}}
	root := t.TempDir()
	_, errs, code := rt(t, root, "create", "--bundle", writeBundle(t, spec), "dev2")
	if code == 0 {
		rt(t, root, "delete", "--force", "dev2")
		t.Fatal("create took a device number no host node has")
	}
	t.Logf("create: %s", errs)
	if !strings.Contains(errs, "linux.devices[0]") || !strings.Contains(errs, "4095:1048575") {
		t.Errorf("create refused it as %q, want the field linux.devices[0] and the number named", errs)
	}
}
