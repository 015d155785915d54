package seccomp_test

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// A probe calls one system call with a bad descriptor, pointer or flag, so
// that, reaching the kernel, it fails harmlessly (EBADF, EFAULT, EINVAL...),
// and stopped by the filter, it fails with the filter's errno (bubblewrap's
// tests/try-syscall.c technique). The battery runs under the default profile
// with its errno 1 (EPERM) replaced by marker, which no kernel path returns
// for these calls, so "filtered" cannot be confused with a kernel EPERM when
// the test runs unprivileged.
type probe struct {
	name string
	want string // deny (marker errno), allow (anything else), enosys (exactly ENOSYS)
	run  func() int
}

const marker = unix.EHWPOISON

func sys(nr uintptr, a ...uintptr) func() int {
	var args [6]uintptr
	copy(args[:], a)
	return func() int {
		_, _, e := unix.Syscall6(nr, args[0], args[1], args[2], args[3], args[4], args[5])
		return int(e)
	}
}

const (
	afALG     = 38
	afVSOCK   = 40
	tiocsti   = 0x5412
	tioclinux = 0x541C
	tcgets    = 0x5401
	negOne    = ^uintptr(0)
	nsFlags   = unix.CLONE_NEWUSER | unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWNET |
		unix.CLONE_NEWIPC | unix.CLONE_NEWUTS | unix.CLONE_NEWCGROUP
)

var futexWord uint32

var probes = []probe{
	// Kernel attack surface (peers.md section 3, items 13 and 14).
	{"keyctl", "deny", sys(unix.SYS_KEYCTL, 0x7fffffff)},
	{"add_key", "deny", sys(unix.SYS_ADD_KEY, 0, 0, 0, 0, 0)},
	{"request_key", "deny", sys(unix.SYS_REQUEST_KEY, 0, 0, 0, 0)},
	{"bpf", "deny", sys(unix.SYS_BPF, negOne, 0, 0)},
	{"userfaultfd", "deny", sys(unix.SYS_USERFAULTFD, 0xffffffff)},
	{"io_uring_setup", "deny", sys(unix.SYS_IO_URING_SETUP, 1, 0)},
	{"io_uring_enter", "deny", sys(unix.SYS_IO_URING_ENTER, negOne, 0, 0, 0, 0, 0)},
	{"io_uring_register", "deny", sys(unix.SYS_IO_URING_REGISTER, negOne, 0, 0, 0)},
	{"perf_event_open", "deny", sys(unix.SYS_PERF_EVENT_OPEN, 0, 0, negOne, negOne, 0)},
	{"ptrace", "deny", sys(unix.SYS_PTRACE, unix.PTRACE_ATTACH, 0x7fffffff)},
	{"process_vm_readv", "deny", sys(unix.SYS_PROCESS_VM_READV, 0x7fffffff, 0, 0, 0, 0, 1)},
	{"process_vm_writev", "deny", sys(unix.SYS_PROCESS_VM_WRITEV, 0x7fffffff, 0, 0, 0, 0, 1)},
	{"kexec_load", "deny", sys(unix.SYS_KEXEC_LOAD, 0, 0, 0, 0x100)},
	{"kexec_file_load", "deny", sys(unix.SYS_KEXEC_FILE_LOAD, negOne, negOne, 0, 0, 0x100)},
	{"init_module", "deny", sys(unix.SYS_INIT_MODULE, 0, 0, 0)},
	{"finit_module", "deny", sys(unix.SYS_FINIT_MODULE, negOne, 0, 0)},
	{"delete_module", "deny", sys(unix.SYS_DELETE_MODULE, 0, 0)},
	{"open_by_handle_at", "deny", sys(unix.SYS_OPEN_BY_HANDLE_AT, negOne, 0, 0)},
	{"mount", "deny", sys(unix.SYS_MOUNT, 0, 0, 0, 0, 0)},
	{"umount2", "deny", sys(unix.SYS_UMOUNT2, 0, 0)},
	{"pivot_root", "deny", sys(unix.SYS_PIVOT_ROOT, 0, 0)},
	{"chroot", "deny", sys(unix.SYS_CHROOT, 0)},
	{"unshare", "deny", sys(unix.SYS_UNSHARE, unix.CLONE_NEWUSER)},
	{"setns", "deny", sys(unix.SYS_SETNS, negOne, 0)},
	{"fsopen", "deny", sys(unix.SYS_FSOPEN, 0, 0)},
	{"fsconfig", "deny", sys(unix.SYS_FSCONFIG, negOne, 0, 0, 0, 0)},
	{"fsmount", "deny", sys(unix.SYS_FSMOUNT, negOne, 0, 0)},
	{"fspick", "deny", sys(unix.SYS_FSPICK, negOne, 0, 0)},
	{"move_mount", "deny", sys(unix.SYS_MOVE_MOUNT, negOne, 0, negOne, 0, 0)},
	{"open_tree", "deny", sys(unix.SYS_OPEN_TREE, negOne, 0, 0)},
	{"mount_setattr", "deny", sys(unix.SYS_MOUNT_SETATTR, negOne, 0, 0, 0, 0)},
	{"swapon", "deny", sys(unix.SYS_SWAPON, 0, 0)},
	{"swapoff", "deny", sys(unix.SYS_SWAPOFF, 0)},
	{"reboot", "deny", sys(unix.SYS_REBOOT, 0, 0, 0, 0)},
	{"syslog", "deny", sys(unix.SYS_SYSLOG, negOne, 0, 0)},
	{"acct", "deny", sys(unix.SYS_ACCT, 1)},
	{"quotactl", "deny", sys(unix.SYS_QUOTACTL, 0, 0, 0, 0)},

	// clone: allowed without namespace flags only; clone3 answers ENOSYS.
	// CLONE_THREAD without CLONE_SIGHAND is EINVAL in the kernel, so no
	// process is ever created here.
	{"clone CLONE_NEWUSER", "deny", sys(unix.SYS_CLONE, unix.CLONE_NEWUSER|unix.CLONE_THREAD)},
	{"clone CLONE_NEWNS", "deny", sys(unix.SYS_CLONE, unix.CLONE_NEWNS|unix.CLONE_THREAD)},
	{"clone CLONE_NEWPID", "deny", sys(unix.SYS_CLONE, unix.CLONE_NEWPID|unix.CLONE_THREAD)},
	{"clone CLONE_NEWNET", "deny", sys(unix.SYS_CLONE, unix.CLONE_NEWNET|unix.CLONE_THREAD)},
	{"clone CLONE_NEWCGROUP", "deny", sys(unix.SYS_CLONE, unix.CLONE_NEWCGROUP|unix.CLONE_THREAD)},
	{"clone all namespaces", "deny", sys(unix.SYS_CLONE, nsFlags|unix.CLONE_THREAD)},
	{"clone plain", "allow", sys(unix.SYS_CLONE, unix.CLONE_THREAD)},
	{"clone3", "enosys", sys(unix.SYS_CLONE3, 0, 0)},

	// Terminal injection (CVE-2017-5226, CVE-2019-10063, CVE-2023-28100).
	{"ioctl TIOCSTI", "deny", sys(unix.SYS_IOCTL, negOne, tiocsti, 0)},
	{"ioctl TIOCSTI high bits", "deny", sys(unix.SYS_IOCTL, negOne, 0xffffffff00000000|tiocsti, 0)},
	{"ioctl TIOCSTI other high bits", "deny", sys(unix.SYS_IOCTL, negOne, 0x12300000000|tiocsti, 0)},
	{"ioctl TIOCLINUX", "deny", sys(unix.SYS_IOCTL, negOne, tioclinux, 0)},
	{"ioctl TIOCLINUX high bits", "deny", sys(unix.SYS_IOCTL, negOne, 0xffffffff00000000|tioclinux, 0)},
	{"ioctl TCGETS", "allow", sys(unix.SYS_IOCTL, negOne, tcgets, 0)},

	// Socket families.
	{"socket AF_PACKET", "deny", sys(unix.SYS_SOCKET, unix.AF_PACKET, unix.SOCK_RAW, 0)},
	{"socket AF_VSOCK", "deny", sys(unix.SYS_SOCKET, afVSOCK, unix.SOCK_STREAM, 0)},
	{"socket AF_ALG", "deny", sys(unix.SYS_SOCKET, afALG, unix.SOCK_SEQPACKET, 0)},
	{"socket AF_NETLINK xfrm", "deny", sys(unix.SYS_SOCKET, unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_XFRM)},
	{"socket AF_NETLINK audit", "deny", sys(unix.SYS_SOCKET, unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_AUDIT)},
	{"socket AF_NETLINK netfilter", "deny", sys(unix.SYS_SOCKET, unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_NETFILTER)},
	{"socket AF_NETLINK route", "allow", sys(unix.SYS_SOCKET, unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)},
	{"socket AF_UNIX", "allow", sys(unix.SYS_SOCKET, unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)},
	{"socket AF_INET", "allow", sys(unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)},
	{"socket AF_INET6", "allow", sys(unix.SYS_SOCKET, unix.AF_INET6, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)},

	// personality: only the values Docker allows too. The query (0xffffffff)
	// runs first; the denied ones would change nothing if they got through
	// except this throw-away child.
	{"personality query", "allow", sys(unix.SYS_PERSONALITY, 0xffffffff)},
	{"personality PER_LINUX32", "allow", sys(unix.SYS_PERSONALITY, 0x0008)},
	{"personality ADDR_NO_RANDOMIZE", "deny", sys(unix.SYS_PERSONALITY, 0x0040000)},
	{"personality READ_IMPLIES_EXEC", "deny", sys(unix.SYS_PERSONALITY, 0x0400000)},
	{"personality PER_BSD", "deny", sys(unix.SYS_PERSONALITY, 0x0006)},
	{"personality PER_LINUX", "allow", sys(unix.SYS_PERSONALITY, 0x0000)},

	// Syscalls newer than the profile answer ENOSYS (enosysStub).
	{"unassigned syscall 1000", "enosys", sys(1000)},

	// Ordinary things keep working.
	{"getpid", "allow", sys(unix.SYS_GETPID)},
	{"close bad fd", "allow", sys(unix.SYS_CLOSE, negOne)},
	{"socketpair", "allow", func() int {
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return int(err.(unix.Errno))
		}
		unix.Close(fds[0])
		unix.Close(fds[1])
		return 0
	}},
	{"mmap", "allow", func() int {
		b, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
		if err != nil {
			return int(err.(unix.Errno))
		}
		b[0] = 1
		if err := unix.Munmap(b); err != nil {
			return int(err.(unix.Errno))
		}
		return 0
	}},
	{"futex wake", "allow", func() int {
		_, _, e := unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(&futexWord)), 1 /* FUTEX_WAKE */, 1, 0, 0, 0)
		return int(e)
	}},
}
