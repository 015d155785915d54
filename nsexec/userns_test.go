//go:build linux

package nsexec

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/conformance/testenv"
	"github.com/moat-sandbox/moat/seccomp"
	"golang.org/x/sys/unix"
)

func init() {
	probes["filter-refuses"] = func() error { fmt.Println(filterProbes()); return nil }
	helpers["filter-unshare"] = func() error { return underProgram(newUserNSFilter()) }
	helpers["filter-sethostname"] = func() error { return underFilter(unix.SYS_SETHOSTNAME) }
}

func filterProbes() string {
	u, _ := UserNSRefused()
	h, _ := HostnameRefused()
	return fmt.Sprintf("userns %v hostname %v clear %v", u, h, UserNSClear())
}

// underFilter loads a filter answering EPERM to syscall nr, as a
// container engine's profile does, and prints what the probes say.
func underFilter(nr uint32) error {
	return underProgram(seccomp.Program{
		{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: 0},
		{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, K: nr, Jt: 0, Jf: 1},
		{Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)},
		{Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_ALLOW},
	})
}

// newUserNSFilter answers EPERM to unshare and to a clone that asks for
// a new user namespace, as moat's own filter and container profiles do
// (the probe's clone meets it; a clone for a thread does not).
func newUserNSFilter() seccomp.Program {
	return seccomp.Program{
		{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: 0},
		{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, K: unix.SYS_UNSHARE, Jt: 4, Jf: 0},
		{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, K: unix.SYS_CLONE, Jt: 0, Jf: 2},
		{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: 16}, // flags, low word
		{Code: unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K, K: unix.CLONE_NEWUSER, Jt: 1, Jf: 0},
		{Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_ALLOW},
		{Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)},
	}
}

// underProgram loads prog and prints what the probes say.
func underProgram(prog seccomp.Program) error {
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return err
	}
	err := seccomp.Load(prog)
	if err != nil {
		return err
	}
	fmt.Println(filterProbes())
	return nil
}

// The probes of a filter around moat see what it refuses (UserNSClear
// by the unshare EINVAL trick, which a filter that refuses only
// sethostname lets through): as root (who
// has CAP_SYS_ADMIN, so the kernel's own answer to the probe's
// sethostname is EINVAL), exactly that; with no filter (this host),
// nothing; inside a sandbox, new namespaces under moat's own kind of
// filter, and the hostname too, since its tool lacks the capability that
// would tell the filter's EPERM from the kernel's (counted as refused).
func TestFilterProbes(t *testing.T) {
	if got := filterProbes(); got != "userns false hostname false clear true" {
		t.Fatalf("on the test host, which has no filter: %s", got)
	}
	cfg := probeConfig(t, "filter-refuses")
	b, err := newUserNSFilter().MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	cfg.Seccomp = b
	if r := mustRun(t, cfg); strings.TrimSpace(r.stdout) != "userns true hostname true clear false" {
		t.Errorf("in a sandbox whose filter refuses unshare: %q", r.stdout)
	}
	testenv.RequireRoot(t)
	for helper, want := range map[string]string{
		"filter-unshare":     "userns true hostname false clear false",
		"filter-sethostname": "userns false hostname true clear true",
	} {
		if got := strings.TrimSpace(runHelperProcess(t, helper)); got != want {
			t.Errorf("as root under a filter refusing %s: %q, want %q", strings.TrimPrefix(helper, "filter-"), got, want)
		}
	}
}

// The sysctls decide a refusal only where it is certain: a
// max_user_namespaces of 0 here, Debian's unprivileged_userns_clone of 0
// without CAP_SYS_ADMIN; a nonzero maximum, the Debian sysctl with the
// capability, or sysctls that cannot be read leave it to the probe.
func TestUserNSSysctlRefusal(t *testing.T) {
	read := func(vals map[string]string) func(string) ([]byte, error) {
		return func(path string) ([]byte, error) {
			if v, ok := vals[filepath.Base(path)]; ok {
				return []byte(v + "\n"), nil
			}
			return nil, os.ErrNotExist
		}
	}
	for _, c := range []struct {
		vals     map[string]string
		sysAdmin bool
		want     string // in the reason when refused, "" for not refused
	}{
		{map[string]string{"max_user_namespaces": "0"}, true, "max_user_namespaces is 0"},
		{map[string]string{"max_user_namespaces": "15000", "unprivileged_userns_clone": "0"}, false, "unprivileged_userns_clone is 0"},
		{map[string]string{"max_user_namespaces": "15000", "unprivileged_userns_clone": "0"}, true, ""},
		{map[string]string{"max_user_namespaces": "15000", "unprivileged_userns_clone": "1"}, false, ""},
		{map[string]string{"max_user_namespaces": "1"}, false, ""},
		{nil, false, ""},
	} {
		got, why := userNSSysctlRefusal(read(c.vals), c.sysAdmin)
		if got != (c.want != "") || !strings.Contains(why, c.want) {
			t.Errorf("%v, CAP_SYS_ADMIN %v: refused %v (%q), want %q", c.vals, c.sysAdmin, got, why, c.want)
		}
	}
}

// A sandbox's clone refused a user namespace is read as the probe's is;
// the same errno of another step, or a transient one, is no refusal.
func TestUserNSVerdictOfAClone(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{&SetupError{Step: StepClone, Errno: unix.EPERM}, true},
		{fmt.Errorf("start: %w", &SetupError{Step: StepClone, Errno: unix.ENOSPC}), true},
		{&SetupError{Step: StepClone, Errno: unix.EUSERS}, true},
		{&SetupError{Step: StepClone, Errno: unix.EAGAIN}, false},
		{&SetupError{Step: StepClone, Errno: unix.ENOMEM}, false},
		{&SetupError{Step: StepMount, Errno: unix.EPERM}, false},
		{&SetupError{Step: StepExec, Errno: unix.ENOSPC}, false},
	} {
		if got, why := UserNSVerdict(c.err); got != c.want || (got && !strings.Contains(why, "refuses a new user namespace")) {
			t.Errorf("%v: refused %v (%q), want %v", c.err, got, why, c.want)
		}
	}
}
