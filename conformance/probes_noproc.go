package conformance

import (
	"fmt"
	"strconv"

	"golang.org/x/sys/unix"
)

// Where the tool has no procfs (mode no-proc), the probes that read
// /proc/self observe the same things by system call, so the checks still
// see them rather than passing on an empty /proc.

// privsBySyscall is /proc/self/status's Cap*, NoNewPrivs, Uid and Gid
// lines from capget(2) and prctl(2), in status's format.
func privsBySyscall() map[string]string {
	out := map[string]string{}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		out["error"] = "capget: " + errText(err)
		return out
	}
	set := func(lo, hi uint32) string { return fmt.Sprintf("%016x", uint64(hi)<<32|uint64(lo)) }
	out["CapInh"] = set(data[0].Inheritable, data[1].Inheritable)
	out["CapPrm"] = set(data[0].Permitted, data[1].Permitted)
	out["CapEff"] = set(data[0].Effective, data[1].Effective)
	var bnd, amb uint64
	for c := uintptr(0); c < 64; c++ {
		b, err := unix.PrctlRetInt(unix.PR_CAPBSET_READ, c, 0, 0, 0)
		if err != nil {
			break // past the kernel's last capability
		}
		if b == 1 {
			bnd |= 1 << c
		}
		if a, err := unix.PrctlRetInt(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_IS_SET, c, 0, 0); err == nil && a == 1 {
			amb |= 1 << c
		}
	}
	out["CapBnd"] = fmt.Sprintf("%016x", bnd)
	out["CapAmb"] = fmt.Sprintf("%016x", amb)
	if n, err := unix.PrctlRetInt(unix.PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0); err == nil {
		out["NoNewPrivs"] = strconv.Itoa(n)
	}
	r, e, s := unix.Getresuid()
	out["Uid"] = fmt.Sprintf("%d\t%d\t%d\t%d", r, e, s, e)
	rg, eg, sg := unix.Getresgid()
	out["Gid"] = fmt.Sprintf("%d\t%d\t%d\t%d", rg, eg, sg, eg)
	return out
}

// fdsBySyscall is probe-fds's listing without /proc/self/fd: every
// descriptor below the soft RLIMIT_NOFILE that fcntl(2) finds open, named
// by its device and inode.
func fdsBySyscall() map[string]any {
	var lim unix.Rlimit
	max := uint64(1024)
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &lim) == nil && lim.Cur < 1<<16 {
		max = lim.Cur
	}
	fds := map[string]string{}
	cloexec := map[string]bool{}
	for fd := 0; uint64(fd) < max; fd++ {
		fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		if err != nil {
			continue
		}
		var st unix.Stat_t
		target := "?"
		if unix.Fstat(fd, &st) == nil {
			target = fmt.Sprintf("dev %d ino %d", st.Dev, st.Ino)
		}
		n := strconv.Itoa(fd)
		fds[n] = target
		cloexec[n] = fl&unix.FD_CLOEXEC != 0
	}
	return map[string]any{"fds": fds, "cloexec": cloexec}
}
