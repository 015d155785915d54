//go:build linux

package nsexec

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"testing"

	"github.com/moat-sandbox/moat/seccomp"
	"golang.org/x/sys/unix"
)

func init() {
	helpers["nouserns"] = helperNoUserNS
}

// runHelperProcess runs helper name in a copy of the test binary on the
// host and returns its combined output.
func runHelperProcess(t *testing.T, name string) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), helperVar+"="+name)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helper %s: %v\n%s", name, err, out)
	}
	return string(out)
}

// helperNoUserNS makes user namespaces unavailable to this process (a
// seccomp filter failing clone with CLONE_NEWUSER, as a container's profile
// does) and reports what Start says.
func helperNoUserNS() error {
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return err
	}
	const (
		ldAbs = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
		jeq   = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
		jset  = unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K
		ret   = unix.BPF_RET | unix.BPF_K
	)
	prog := seccomp.Program{
		{Code: ldAbs, K: 0},                                         // seccomp_data.nr
		{Code: jeq, K: unix.SYS_CLONE, Jt: 0, Jf: 3},                // not clone: allow
		{Code: ldAbs, K: 16},                                        // args[0], low half
		{Code: jset, K: unix.CLONE_NEWUSER, Jt: 0, Jf: 1},           // no CLONE_NEWUSER: allow
		{Code: ret, K: unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)}, // refused
		{Code: ret, K: unix.SECCOMP_RET_ALLOW},
	}
	if err := seccomp.Load(prog); err != nil {
		return err
	}
	_, err := Start(context.Background(), &Config{Args: []string{"/bin/true"}}, Stdio{})
	var se *SetupError
	if !errors.As(err, &se) {
		return fmt.Errorf("got %v, want a SetupError", err)
	}
	fmt.Printf("step=%v errno=%v hint=%s\n", se.Step, se.Errno, se.Hint)
	return nil
}

// denyMkdirat is a filter that fails mkdirat with EPERM and allows the rest.
func denyMkdirat(t *testing.T) []byte { return denySyscall(t, unix.SYS_MKDIRAT) }

// denySyscall is a filter that answers EPERM to syscall nr and allows the
// rest.
func denySyscall(t *testing.T, nr uint32) []byte {
	t.Helper()
	prog := seccomp.Program{
		{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: 0},
		{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, K: nr, Jt: 0, Jf: 1},
		{Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)},
		{Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_ALLOW},
	}
	b, err := prog.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	return b
}
