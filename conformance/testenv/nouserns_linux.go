package testenv

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// noUserNSVar marks the copy of the test binary that InNoUserNS started.
const noUserNSVar = "MOAT_TEST_NO_USERNS"

// InNoUserNS runs the current test again in a copy of this binary in a
// user namespace of its own where no further user namespace can be made:
// its root (the caller's uid, or every id as root) sets
// /proc/sys/user/max_user_namespaces to 0 in it, a limit of that
// namespace alone (kernel/ucount.c, user_table: each user namespace has
// its own, and its root may lower it), so the host is not changed. It
// returns true in the caller, which should then return (a failed copy
// fails t), and false in the copy, once the limit is 0.
//
//	if testenv.InNoUserNS(t) { return }
func InNoUserNS(t *testing.T) bool {
	t.Helper()
	if os.Getenv(noUserNSVar) != "" {
		if err := os.WriteFile("/proc/sys/user/max_user_namespaces", []byte("0"), 0); err != nil {
			t.Fatalf("set max_user_namespaces to 0 in the test's user namespace: %v", err)
		}
		return false
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	uid, gid := os.Geteuid(), os.Getegid()
	size := 1
	if uid == 0 {
		size = 1<<32 - 1 // as root, every id keeps its own
	}
	cmd := exec.Command(self, "-test.run="+runPattern(t.Name()), "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), noUserNSVar+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: uid, Size: size}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: gid, Size: size}},
	}
	out, err := cmd.CombinedOutput()
	t.Logf("in a user namespace without user namespaces (uid %s outside):\n%s", strconv.Itoa(uid), out)
	if err != nil {
		t.Fatalf("the run in a user namespace without user namespaces failed: %v", err)
	}
	if strings.Contains(string(out), "--- SKIP: "+t.Name()+" (") {
		Skipf(t, "the run in a user namespace without user namespaces skipped")
	} else if !strings.Contains(string(out), "--- PASS: "+t.Name()+" (") {
		t.Fatalf("the run in a user namespace without user namespaces did not run %s", t.Name())
	}
	return true
}

// NoUserNSCopy reports whether this process is the copy InNoUserNS
// started.
func NoUserNSCopy() bool { return os.Getenv(noUserNSVar) != "" }
