package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/moat-sandbox/moat/conformance/testenv"
	"github.com/moat-sandbox/moat/nsexec"
)

// moat doctor where no user namespace can be made: inside a user
// namespace of the test's own whose user.max_user_namespaces is 0 (a
// sysctl of that namespace, which its root may set: no host change). The
// sandbox there is the no-userns rung's: doctor's userns line says none
// (not ok), its mode line no-userns, and one problem names the sysctl.
// Where the kernel's Landlock is below the rung's, no sandbox starts:
// both lines say FAILED and the problem is the sandbox's, naming the
// ABIs. Before the rung, the mode line said "ok full" under "userns
// FAILED".
func TestDoctorModeAgreesWhereNoSandboxStarts(t *testing.T) {
	// The namespace's root is an ordinary user (root's own uid would make
	// moat host root in name only, which fails earlier, at the workdir).
	uid, gid := os.Getuid(), os.Getgid()
	if uid == 0 {
		uid, gid = testenv.NobodyUID, testenv.NobodyGID
	}
	doctor := func(args ...string) (string, string) {
		t.Helper()
		cmd := exec.Command("/bin/sh", append([]string{"-c", `echo 0 > /proc/sys/user/max_user_namespaces || exit 99; exec "$0" "$@"`, moatBin(t), "doctor"}, args...)...)
		cmd.Dir = "/"
		cmd.SysProcAttr = &syscall.SysProcAttr{
			Cloneflags:  syscall.CLONE_NEWUSER,
			UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: uid, Size: 1}},
			GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: gid, Size: 1}},
			// Become the namespace's root: host root, the creator, is not
			// mapped in it (setuid after the maps; setgroups is denied).
			Credential: &syscall.Credential{Uid: 0, Gid: 0, NoSetGroups: true},
		}
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		if ee, ok := err.(*exec.ExitError); ok && ee.ExitCode() == 99 {
			testenv.Skipf(t, "user.max_user_namespaces cannot be set in a user namespace here: %s", errb.String())
		} else if err != nil && !ok {
			testenv.Skipf(t, "no user namespace for the test: %v", err)
		}
		return out.String(), errb.String()
	}
	out, errs := doctor()
	var userns, mode string
	for _, l := range strings.Split(out, "\n") {
		// The first such lines are the layers'; a problem's wrapped text
		// may start with the same word later.
		switch f := strings.Fields(l); {
		case len(f) > 1 && f[0] == "userns" && userns == "":
			userns = f[1]
		case len(f) > 1 && f[0] == "mode" && mode == "":
			mode = l
		}
	}
	runs := nsexec.LandlockABI() >= nsexec.NoUserNSMinABI
	if runs {
		if userns != "none" || !strings.HasPrefix(mode, "mode      degraded  no-userns") {
			t.Errorf("moat doctor where no user namespace can be made: userns %q, %q; want none and the mode no-userns:\n%s%s", userns, mode, out, errs)
		}
		if !strings.Contains(out, "max_user_namespaces") || !strings.Contains(out, "sandboxes run in mode no-userns") || strings.Contains(out, "a sandbox cannot be started") {
			t.Errorf("moat doctor's problems: want the mode's, naming the sysctl, and no failed sandbox:\n%s%s", out, errs)
		}
	} else {
		if userns != "FAILED" || !strings.HasPrefix(mode, "mode      FAILED    no-userns: no sandbox starts here") {
			t.Errorf("moat doctor below Landlock ABI %d: userns %q, %q; want both FAILED, the mode no-userns:\n%s%s", nsexec.NoUserNSMinABI, userns, mode, out, errs)
		}
		if !strings.Contains(out, "Landlock ABI") || strings.Contains(out, "sandboxes run in mode") {
			t.Errorf("moat doctor's problems: want the sandbox's, naming the Landlock ABIs, and no mode a sandbox runs in:\n%s%s", out, errs)
		}
	}

	var r doctorReport
	out, errs = doctor("--json")
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("moat doctor --json: %v\n%s%s", err, out, errs)
	}
	if r.UserNS.Works != runs || r.Mode.Mode != string(nsexec.ModeNoUserNS) || (!runs && !strings.Contains(r.Mode.Reason, "Landlock")) {
		t.Errorf("moat doctor --json: userNamespaces.works %v, mode %+v; want works %v, no-userns", r.UserNS.Works, r.Mode, runs)
	}
}
