// Package attack is moat's table of hostile system calls: each calls one
// dangerous syscall with a bad descriptor, pointer or flag, so that reaching
// the kernel it fails harmlessly (EBADF, EFAULT, EINVAL...) and stopped by a
// seccomp filter it fails with the filter's errno (bubblewrap's
// tests/try-syscall.c technique). The seccomp tests run it under the
// compiled profiles; the conformance kit runs it inside real sandboxes.
package attack

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// Want is what a probe expects of a filter.
type Want string

// The expectations: Deny (the filter's errno), Allow (the kernel's answer,
// whatever it is), ENOSYS (exactly ENOSYS, as for clone3).
const (
	Deny   Want = "deny"
	Allow  Want = "allow"
	ENOSYS Want = "enosys"
)

// Probe is one hostile (or, for Allow, ordinary) system call.
type Probe struct {
	Name string
	Want Want
	// Run makes the call and returns its errno (0 on success).
	Run func() unix.Errno
}

// Probes returns the whole table, native-architecture calls first, then
// the compat-ABI ones of this architecture (x32 and i386 on amd64).
func Probes() []Probe { return append(append([]Probe(nil), probes...), archProbes...) }

func sys(nr uintptr, a ...uintptr) func() unix.Errno {
	var args [6]uintptr
	copy(args[:], a)
	return func() unix.Errno {
		_, _, e := unix.Syscall6(nr, args[0], args[1], args[2], args[3], args[4], args[5])
		return e
	}
}

const (
	afALG     = 38
	afVSOCK   = 40
	tiocsti   = 0x5412
	tioclinux = 0x541C
	tcgets    = 0x5401
	tcsets    = 0x5402
	tiocgetd  = 0x5424
	negOne    = ^uintptr(0)
	nsFlags   = unix.CLONE_NEWUSER | unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWNET |
		unix.CLONE_NEWIPC | unix.CLONE_NEWUTS | unix.CLONE_NEWCGROUP
)

var futexWord uint32

var probes = []Probe{
	// Kernel attack surface (peers.md section 3, items 13 and 14).
	{"keyctl", Deny, sys(unix.SYS_KEYCTL, 0x7fffffff)},
	{"add_key", Deny, sys(unix.SYS_ADD_KEY, 0, 0, 0, 0, 0)},
	{"request_key", Deny, sys(unix.SYS_REQUEST_KEY, 0, 0, 0, 0)},
	{"bpf", Deny, sys(unix.SYS_BPF, negOne, 0, 0)},
	{"userfaultfd", Deny, sys(unix.SYS_USERFAULTFD, 0xffffffff)},
	{"io_uring_setup", Deny, sys(unix.SYS_IO_URING_SETUP, 1, 0)},
	{"io_uring_enter", Deny, sys(unix.SYS_IO_URING_ENTER, negOne, 0, 0, 0, 0, 0)},
	{"io_uring_register", Deny, sys(unix.SYS_IO_URING_REGISTER, negOne, 0, 0, 0)},
	{"perf_event_open", Deny, sys(unix.SYS_PERF_EVENT_OPEN, 0, 0, negOne, negOne, 0)},
	{"ptrace", Deny, sys(unix.SYS_PTRACE, unix.PTRACE_ATTACH, 0x7fffffff)},
	{"process_vm_readv", Deny, sys(unix.SYS_PROCESS_VM_READV, 0x7fffffff, 0, 0, 0, 0, 1)},
	{"process_vm_writev", Deny, sys(unix.SYS_PROCESS_VM_WRITEV, 0x7fffffff, 0, 0, 0, 0, 1)},
	{"kexec_load", Deny, sys(unix.SYS_KEXEC_LOAD, 0, 0, 0, 0x100)},
	{"kexec_file_load", Deny, sys(unix.SYS_KEXEC_FILE_LOAD, negOne, negOne, 0, 0, 0x100)},
	{"init_module", Deny, sys(unix.SYS_INIT_MODULE, 0, 0, 0)},
	{"finit_module", Deny, sys(unix.SYS_FINIT_MODULE, negOne, 0, 0)},
	{"delete_module", Deny, sys(unix.SYS_DELETE_MODULE, 0, 0)},
	{"open_by_handle_at", Deny, sys(unix.SYS_OPEN_BY_HANDLE_AT, negOne, 0, 0)},
	{"mount", Deny, sys(unix.SYS_MOUNT, 0, 0, 0, 0, 0)},
	{"umount2", Deny, sys(unix.SYS_UMOUNT2, 0, 0)},
	{"pivot_root", Deny, sys(unix.SYS_PIVOT_ROOT, 0, 0)},
	{"chroot", Deny, sys(unix.SYS_CHROOT, 0)},
	{"unshare", Deny, sys(unix.SYS_UNSHARE, unix.CLONE_NEWUSER)},
	{"setns", Deny, sys(unix.SYS_SETNS, negOne, 0)},
	{"fsopen", Deny, sys(unix.SYS_FSOPEN, 0, 0)},
	{"fsconfig", Deny, sys(unix.SYS_FSCONFIG, negOne, 0, 0, 0, 0)},
	{"fsmount", Deny, sys(unix.SYS_FSMOUNT, negOne, 0, 0)},
	{"fspick", Deny, sys(unix.SYS_FSPICK, negOne, 0, 0)},
	{"move_mount", Deny, sys(unix.SYS_MOVE_MOUNT, negOne, 0, negOne, 0, 0)},
	{"open_tree", Deny, sys(unix.SYS_OPEN_TREE, negOne, 0, 0)},
	{"mount_setattr", Deny, sys(unix.SYS_MOUNT_SETATTR, negOne, 0, 0, 0, 0)},
	{"swapon", Deny, sys(unix.SYS_SWAPON, 0, 0)},
	{"swapoff", Deny, sys(unix.SYS_SWAPOFF, 0)},
	{"reboot", Deny, sys(unix.SYS_REBOOT, 0, 0, 0, 0)},
	{"syslog", Deny, sys(unix.SYS_SYSLOG, negOne, 0, 0)},
	{"acct", Deny, sys(unix.SYS_ACCT, 1)},
	{"quotactl", Deny, sys(unix.SYS_QUOTACTL, 0, 0, 0, 0)},

	// clone: allowed without namespace flags only; clone3 answers ENOSYS.
	// CLONE_THREAD without CLONE_SIGHAND is EINVAL in the kernel, so no
	// process is ever created here.
	{"clone CLONE_NEWUSER", Deny, sys(unix.SYS_CLONE, unix.CLONE_NEWUSER|unix.CLONE_THREAD)},
	{"clone CLONE_NEWNS", Deny, sys(unix.SYS_CLONE, unix.CLONE_NEWNS|unix.CLONE_THREAD)},
	{"clone CLONE_NEWPID", Deny, sys(unix.SYS_CLONE, unix.CLONE_NEWPID|unix.CLONE_THREAD)},
	{"clone CLONE_NEWNET", Deny, sys(unix.SYS_CLONE, unix.CLONE_NEWNET|unix.CLONE_THREAD)},
	{"clone CLONE_NEWCGROUP", Deny, sys(unix.SYS_CLONE, unix.CLONE_NEWCGROUP|unix.CLONE_THREAD)},
	{"clone all namespaces", Deny, sys(unix.SYS_CLONE, nsFlags|unix.CLONE_THREAD)},
	{"clone plain", Allow, sys(unix.SYS_CLONE, unix.CLONE_THREAD)},
	{"clone3", ENOSYS, sys(unix.SYS_CLONE3, 0, 0)},

	// Terminal injection (CVE-2017-5226, CVE-2019-10063, CVE-2023-28100).
	{"ioctl TIOCSTI", Deny, sys(unix.SYS_IOCTL, negOne, tiocsti, 0)},
	{"ioctl TIOCSTI high bits", Deny, sys(unix.SYS_IOCTL, negOne, 0xffffffff00000000|tiocsti, 0)},
	{"ioctl TIOCSTI other high bits", Deny, sys(unix.SYS_IOCTL, negOne, 0x12300000000|tiocsti, 0)},
	{"ioctl TIOCLINUX", Deny, sys(unix.SYS_IOCTL, negOne, tioclinux, 0)},
	{"ioctl TIOCLINUX high bits", Deny, sys(unix.SYS_IOCTL, negOne, 0xffffffff00000000|tioclinux, 0)},
	// Terminal state that outlives the run when the caller's terminal is
	// the tool's stdio: line discipline (N_NULL silences the session),
	// console redirect, serial settings, locked termios, exclusive mode,
	// hangup, and the console's keymap, keyboard mode, font and VT switch
	// (every 0x4Bxx and 0x56xx request). Ordinary termios stays allowed.
	{"ioctl TIOCSETD", Deny, sys(unix.SYS_IOCTL, negOne, unix.TIOCSETD, 0)},
	{"ioctl TIOCSETD high bits", Deny, sys(unix.SYS_IOCTL, negOne, 0xffffffff00000000|unix.TIOCSETD, 0)},
	{"ioctl TIOCCONS", Deny, sys(unix.SYS_IOCTL, negOne, unix.TIOCCONS, 0)},
	{"ioctl TIOCSSERIAL", Deny, sys(unix.SYS_IOCTL, negOne, unix.TIOCSSERIAL, 0)},
	{"ioctl TIOCSLCKTRMIOS", Deny, sys(unix.SYS_IOCTL, negOne, 0x5457, 0)},
	{"ioctl TIOCEXCL", Deny, sys(unix.SYS_IOCTL, negOne, unix.TIOCEXCL, 0)},
	{"ioctl TIOCVHANGUP", Deny, sys(unix.SYS_IOCTL, negOne, 0x5437, 0)},
	{"ioctl KDSKBMODE", Deny, sys(unix.SYS_IOCTL, negOne, 0x4B45, 0)},
	{"ioctl KDSETMODE", Deny, sys(unix.SYS_IOCTL, negOne, 0x4B3A, 0)},
	{"ioctl VT_ACTIVATE", Deny, sys(unix.SYS_IOCTL, negOne, 0x5606, 1)},
	{"ioctl TCGETS", Allow, sys(unix.SYS_IOCTL, negOne, tcgets, 0)},
	{"ioctl TCSETS", Allow, sys(unix.SYS_IOCTL, negOne, tcsets, 0)},
	{"ioctl TIOCGETD", Allow, sys(unix.SYS_IOCTL, negOne, tiocgetd, 0)},

	// Socket families.
	{"socket AF_PACKET", Deny, sys(unix.SYS_SOCKET, unix.AF_PACKET, unix.SOCK_RAW, 0)},
	{"socket AF_VSOCK", Deny, sys(unix.SYS_SOCKET, afVSOCK, unix.SOCK_STREAM, 0)},
	{"socket AF_ALG", Deny, sys(unix.SYS_SOCKET, afALG, unix.SOCK_SEQPACKET, 0)},
	{"socket AF_NETLINK xfrm", Deny, sys(unix.SYS_SOCKET, unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_XFRM)},
	{"socket AF_NETLINK audit", Deny, sys(unix.SYS_SOCKET, unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_AUDIT)},
	{"socket AF_NETLINK netfilter", Deny, sys(unix.SYS_SOCKET, unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_NETFILTER)},
	{"socket AF_NETLINK route", Allow, sys(unix.SYS_SOCKET, unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)},
	{"socket AF_UNIX", Allow, sys(unix.SYS_SOCKET, unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)},
	{"socket AF_INET", Allow, sys(unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)},
	{"socket AF_INET6", Allow, sys(unix.SYS_SOCKET, unix.AF_INET6, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)},

	// personality: only the values Docker allows too. The query (0xffffffff)
	// runs first; the denied ones would change nothing if they got through
	// except this throw-away child.
	{"personality query", Allow, sys(unix.SYS_PERSONALITY, 0xffffffff)},
	{"personality PER_LINUX32", Allow, sys(unix.SYS_PERSONALITY, 0x0008)},
	{"personality ADDR_NO_RANDOMIZE", Deny, sys(unix.SYS_PERSONALITY, 0x0040000)},
	{"personality READ_IMPLIES_EXEC", Deny, sys(unix.SYS_PERSONALITY, 0x0400000)},
	{"personality PER_BSD", Deny, sys(unix.SYS_PERSONALITY, 0x0006)},
	{"personality PER_LINUX", Allow, sys(unix.SYS_PERSONALITY, 0x0000)},

	// setuid and setgid bits (issue 13, item 4; flatpak refuses them the
	// same way): no call may set S_ISUID or S_ISGID on a file the tool
	// leaves behind, whatever else the mode or the high bits hold. Each
	// passes a bad descriptor or path, so the kernel's own answer is
	// EBADF or EFAULT. openat2's mode sits in a struct the filter cannot
	// read, so openat2 answers ENOSYS and libc falls back to openat.
	{"fchmod S_ISUID", Deny, sys(unix.SYS_FCHMOD, negOne, 0o4755)},
	{"fchmod S_ISGID", Deny, sys(unix.SYS_FCHMOD, negOne, 0o2755)},
	{"fchmod S_ISUID high bits", Deny, sys(unix.SYS_FCHMOD, negOne, 0xffffffff00000000|0o4000)},
	{"fchmodat S_ISUID", Deny, sys(unix.SYS_FCHMODAT, negOne, 0, 0o4755)},
	{"fchmodat S_ISGID", Deny, sys(unix.SYS_FCHMODAT, negOne, 0, 0o2755)},
	{"fchmodat2 S_ISUID", Deny, sys(unix.SYS_FCHMODAT2, negOne, 0, 0o4755, 0)},
	{"fchmodat2 S_ISGID", Deny, sys(unix.SYS_FCHMODAT2, negOne, 0, 0o2755, 0)},
	{"openat O_CREAT S_ISUID", Deny, sys(unix.SYS_OPENAT, negOne, 0, unix.O_CREAT|unix.O_WRONLY, 0o4755)},
	{"openat O_CREAT S_ISGID", Deny, sys(unix.SYS_OPENAT, negOne, 0, unix.O_CREAT|unix.O_WRONLY, 0o2755)},
	{"mknodat S_IFREG|S_ISUID", Deny, sys(unix.SYS_MKNODAT, negOne, 0, unix.S_IFREG|0o4755, 0)},
	{"mknodat S_IFREG|S_ISGID", Deny, sys(unix.SYS_MKNODAT, negOne, 0, unix.S_IFREG|0o2755, 0)},
	{"openat2", ENOSYS, sys(unix.SYS_OPENAT2, negOne, 0, 0, 0)},
	{"fchmod 0755", Allow, sys(unix.SYS_FCHMOD, negOne, 0o755)},
	{"fchmodat 1777", Allow, sys(unix.SYS_FCHMODAT, negOne, 0, 0o1777)},
	{"openat O_CREAT 0644", Allow, sys(unix.SYS_OPENAT, negOne, 0, unix.O_CREAT|unix.O_WRONLY, 0o644)},

	// Syscalls newer than the profile answer ENOSYS (enosysStub).
	{"unassigned syscall 1000", ENOSYS, sys(1000)},

	// Ordinary things keep working.
	{"getpid", Allow, sys(unix.SYS_GETPID)},
	{"close bad fd", Allow, sys(unix.SYS_CLOSE, negOne)},
	{"socketpair", Allow, func() unix.Errno {
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err.(unix.Errno)
		}
		unix.Close(fds[0])
		unix.Close(fds[1])
		return 0
	}},
	{"mmap", Allow, func() unix.Errno {
		b, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
		if err != nil {
			return err.(unix.Errno)
		}
		b[0] = 1
		if err := unix.Munmap(b); err != nil {
			return err.(unix.Errno)
		}
		return 0
	}},
	{"futex wake", Allow, func() unix.Errno {
		_, _, e := unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(&futexWord)), 1 /* FUTEX_WAKE */, 1, 0, 0, 0)
		return e
	}},
}
