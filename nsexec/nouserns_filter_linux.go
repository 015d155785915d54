package nsexec

import (
	"runtime"

	"github.com/moat-sandbox/moat/seccomp"
	"golang.org/x/sys/unix"
)

// The no-userns rung's own filter, loaded before the policy's: what
// Landlock does not cover and a sandbox without a user namespace must not
// do. Landlock checks paths and, from ABI 4, TCP ports; it does not check
// a file's mode, owner or extended attributes (Documentation/userspace-api/
// landlock.rst, "Current limitations"), nor the socket families, so:
//
//   - chmod, fchmod, fchmodat, fchmodat2, the chown family and every xattr
//     change: EPERM, in the workdir too, since the tool's files are the
//     launcher's own (no setuid bit planted for the launcher to run, no
//     mode opened to others);
//   - every set*id and setgroups call: EPERM (the tool keeps the
//     launcher's ids; a root launcher's tool has no capability, so these
//     could only shuffle the ids it has);
//   - setsid and setpgid: EPERM, so that every process the tool starts
//     stays in the init's process group, which a kill of the sandbox ends
//     whole (Process.Signal);
//   - socket and socketpair of any family but AF_UNIX: EAFNOSUPPORT (UDP,
//     raw, netlink, packet sockets reach the host's network, which no
//     namespace holds here). With egress (Config.EgressTCP) socket of
//     AF_INET and AF_INET6 is allowed for a TCP stream (SOCK_STREAM,
//     protocol 0 or IPPROTO_TCP), whose connect Landlock holds to the
//     proxy's port, and a send with MSG_FASTOPEN, which Landlock does not
//     see, is refused: EPERM; any other type or protocol of those
//     families (UDP, ICMP, raw, SCTP, MPTCP): EPERM;
//   - listen: EPERM. A TCP socket's listen(2) binds it to an ephemeral
//     port on every address when it has none (inet_autobind), which
//     Landlock's bind rule does not see: a server open to the network;
//   - socket(AF_UNIX) too: EPERM. Landlock does not check a connect to a
//     pathname unix socket (no file is opened), so a socket of the host
//     (the user's systemd manager or D-Bus, an ssh agent, a container
//     engine's) would be a door out of every rule; and an AF_UNIX
//     datagram socketpair, whose sendmsg may name any such address:
//     EPERM. A stream or seqpacket socketpair stays (it can name no
//     address: net/unix/af_unix.c refuses msg_name on both);
//   - the key management calls and bpf, perf_event_open, userfaultfd:
//     EPERM (the launcher's keyrings are the tool's own user's here; the
//     policy's filter refuses these anyway, a policy without one does not);
//   - io_uring_setup, _enter and _register: ENOSYS (its operations are no
//     system calls this filter sees; liburing users fall back);
//   - a call of another architecture (x86's 32-bit int 0x80 from an
//     x86_64 process) or of the x32 ABI: EPERM, since their numbers are
//     not the ones this filter checks (seccomp(2), "Caveats").
//
// The instructions are written here, classic BPF on seccomp_data
// (include/uapi/linux/seccomp.h: nr at 0, arch at 4, args from 16), so a
// build without cgo has the filter too.

// Offsets in struct seccomp_data; an argument's low word on a
// little-endian architecture (amd64 and arm64, the ones filtered here).
const (
	seccompDataNr   = 0
	seccompDataArch = 4
	seccompDataArg0 = 16
)

// noUserNSRefusedCalls are the calls the filter answers EPERM, those of
// every architecture (plus noUserNSArchCalls).
var noUserNSRefusedCalls = []uintptr{
	unix.SYS_FCHMOD, unix.SYS_FCHMODAT, unix.SYS_FCHMODAT2,
	unix.SYS_FCHOWN, unix.SYS_FCHOWNAT,
	unix.SYS_SETXATTR, unix.SYS_LSETXATTR, unix.SYS_FSETXATTR, unix.SYS_SETXATTRAT,
	unix.SYS_REMOVEXATTR, unix.SYS_LREMOVEXATTR, unix.SYS_FREMOVEXATTR, unix.SYS_REMOVEXATTRAT,
	unix.SYS_SETUID, unix.SYS_SETGID, unix.SYS_SETREUID, unix.SYS_SETREGID,
	unix.SYS_SETRESUID, unix.SYS_SETRESGID, unix.SYS_SETFSUID, unix.SYS_SETFSGID, unix.SYS_SETGROUPS,
	unix.SYS_SETSID, unix.SYS_SETPGID, unix.SYS_LISTEN,
	unix.SYS_KEYCTL, unix.SYS_ADD_KEY, unix.SYS_REQUEST_KEY,
	unix.SYS_BPF, unix.SYS_PERF_EVENT_OPEN, unix.SYS_USERFAULTFD,
}

// noUserNSENOSYSCalls are answered ENOSYS.
var noUserNSENOSYSCalls = []uintptr{unix.SYS_IO_URING_SETUP, unix.SYS_IO_URING_ENTER, unix.SYS_IO_URING_REGISTER}

// noUserNSArchs are the AUDIT_ARCH_* of the architectures the filter is
// written for, and the x32 bit where there is one.
var noUserNSArchs = map[string][2]uint32{
	"amd64": {unix.AUDIT_ARCH_X86_64, 0x40000000}, // __X32_SYSCALL_BIT
	"arm64": {unix.AUDIT_ARCH_AARCH64, 0},
}

// noUserNSFilter is the rung's filter for this architecture, or false
// where it has none (the rung is then refused: Config.NoUserNS); tcp lets
// TCP stream sockets be made (Config.EgressTCP).
func noUserNSFilter(tcp bool) (seccomp.Program, bool) {
	a, ok := noUserNSArchs[runtime.GOARCH]
	if !ok {
		return nil, false
	}
	ret := func(k uint32) unix.SockFilter { return unix.SockFilter{Code: unix.BPF_RET | unix.BPF_K, K: k} }
	eperm := ret(unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM))
	p := seccomp.Program{
		{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: seccompDataArch},
		{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, K: a[0], Jt: 1, Jf: 0},
		eperm,
		{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: seccompDataNr},
	}
	if a[1] != 0 {
		p = append(p, unix.SockFilter{Code: unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K, K: a[1], Jt: 0, Jf: 1}, eperm)
	}
	refuse := func(nrs []uintptr, r unix.SockFilter) {
		for _, nr := range nrs {
			p = append(p, unix.SockFilter{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, K: uint32(nr), Jt: 0, Jf: 1}, r)
		}
	}
	refuse(append(noUserNSRefusedCalls, noUserNSArchCalls...), eperm)
	refuse(noUserNSENOSYSCalls, ret(unix.SECCOMP_RET_ERRNO|uint32(unix.ENOSYS)))
	jeq := func(k uint32, jt, jf uint8) unix.SockFilter {
		return unix.SockFilter{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, K: k, Jt: jt, Jf: jf}
	}
	ld := func(off uint32) unix.SockFilter {
		return unix.SockFilter{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: off}
	}
	arg := func(i uint32) unix.SockFilter { return ld(seccompDataArg0 + 8*i) }
	typeOnly := unix.SockFilter{Code: unix.BPF_ALU | unix.BPF_AND | unix.BPF_K, K: 0xf} // SOCK_TYPE_MASK: without SOCK_CLOEXEC, SOCK_NONBLOCK
	allow := ret(unix.SECCOMP_RET_ALLOW)
	noFamily := ret(unix.SECCOMP_RET_ERRNO | uint32(unix.EAFNOSUPPORT))
	// when is "if nr == call { body }": every path of body returns, so
	// the accumulator still holds nr after it.
	when := func(call uintptr, body ...unix.SockFilter) {
		p = append(p, jeq(uint32(call), 0, uint8(len(body))))
		p = append(p, body...)
	}
	if tcp {
		when(unix.SYS_SOCKET,
			/* 0 */ arg(0),
			/* 1 */ jeq(unix.AF_UNIX, 0, 1), // to 3
			/* 2 */ eperm,
			/* 3 */ jeq(unix.AF_INET, 1, 0), // to 5
			/* 4 */ jeq(unix.AF_INET6, 0, 8), // to 13
			/* 5 */ arg(1),
			/* 6 */ typeOnly,
			/* 7 */ jeq(unix.SOCK_STREAM, 0, 4), // to 12: UDP, raw, ICMP datagrams
			/* 8 */ arg(2),
			/* 9 */ jeq(0, 1, 0), // to 11
			/* 10 */ jeq(unix.IPPROTO_TCP, 0, 1), // to 12: SCTP, MPTCP
			/* 11 */ allow,
			/* 12 */ eperm,
			/* 13 */ noFamily,
		)
		// TCP Fast Open's implicit connect (tcp_sendmsg_fastopen) met no
		// LSM connect hook when Landlock's TCP rules came (Linux 6.7,
		// github.com/landlock-lsm/linux issue 41), so a kernel's connect
		// rule may not see it (6.18 refuses it itself): a send with
		// MSG_FASTOPEN is refused here whatever the kernel does.
		// TCP_FASTOPEN_CONNECT goes through connect(2), which Landlock
		// checks.
		fastOpen := func(flags uint32) []unix.SockFilter {
			return []unix.SockFilter{arg(flags),
				{Code: unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K, K: unix.MSG_FASTOPEN, Jt: 0, Jf: 1}, eperm, allow}
		}
		when(unix.SYS_SENDTO, fastOpen(3)...)
		when(unix.SYS_SENDMSG, fastOpen(2)...)
		when(unix.SYS_SENDMMSG, fastOpen(3)...)
	} else {
		when(unix.SYS_SOCKET,
			/* 0 */ arg(0),
			/* 1 */ jeq(unix.AF_UNIX, 0, 1), // to 3
			/* 2 */ eperm, // socket(AF_UNIX)
			/* 3 */ noFamily,
		)
	}
	when(unix.SYS_SOCKETPAIR,
		/* 0 */ arg(0),
		/* 1 */ jeq(unix.AF_UNIX, 1, 0), // to 3
		/* 2 */ noFamily,
		/* 3 */ arg(1),
		/* 4 */ typeOnly,
		/* 5 */ jeq(unix.SOCK_DGRAM, 0, 1), // to 7
		/* 6 */ eperm,
		/* 7 */ allow,
	)
	return append(p, allow), true
}
