package nsexec

import (
	"bufio"
	"os"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// HostnameRefused reports whether a seccomp filter around this process
// (a container engine's: podman's and Docker's default profiles answer
// EPERM to sethostname without CAP_SYS_ADMIN) would refuse the sandbox's
// init its sethostname(2), which it makes with every capability over its
// own uts namespace; the filter is inherited, so the sandbox meets it
// too. It is decided once per process, and with why when refused.
//
// The probe: no filter at all (Seccomp 0 in /proc/self/status) refuses
// nothing. Under one, sethostname(NULL, 65) is asked: 65 is above
// __NEW_UTS_LEN, so the kernel answers EINVAL and never changes the
// hostname (kernel/sys.c); EPERM is the filter's answer, or this process
// lacks CAP_SYS_ADMIN over its uts namespace while a filter is there,
// which is counted as refused too: the sandbox then keeps a hostname that
// is not its own, and says so, rather than fail.
func HostnameRefused() (bool, string) { return hostnameRefused() }

var hostnameRefused = sync.OnceValues(func() (bool, string) {
	if seccompMode() == 0 {
		return false, ""
	}
	_, _, e := unix.RawSyscall(unix.SYS_SETHOSTNAME, 0, 65, 0)
	if e == unix.EINVAL {
		return false, ""
	}
	return true, "a seccomp filter around moat refuses sethostname (" + e.Error() + "), as a container engine's default profile does without CAP_SYS_ADMIN"
})

// seccompMode is this process's Seccomp line of /proc/self/status (0
// none, 1 strict, 2 filter), 2 when it cannot be read: a filter may be
// there. It is read once per process (HostnameRefused and UserNSClear
// both ask), as a filter once there stays.
var seccompMode = sync.OnceValue(readSeccompMode)

func readSeccompMode() int {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 2
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "Seccomp:"); ok {
			switch strings.TrimSpace(v) {
			case "0":
				return 0
			case "1":
				return 1
			}
			return 2
		}
	}
	return 2
}
