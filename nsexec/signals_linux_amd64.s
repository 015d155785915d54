#include "textflag.h"

// The init's signal handler (signals_linux_amd64.go says why it is not Go).
// The kernel calls it with the signal in DI and the siginfo in SI, on the
// thread's alternate signal stack (SA_ONSTACK: every Go thread has one). It
// makes system calls only, touches no Go state but the variables of
// signals_linux_amd64.go, and needs no stack but its return address.

#define SYS_rt_sigreturn	15
#define SYS_kill		62
#define SYS_gettid		186
#define SYS_exit_group		231
#define SYS_tgkill		234
#define SYS_setresuid		117
#define SYS_setgroups		116
#define SYS_getgroups		115
#define SYS_setresgid		119
#define SYS_capset		126
#define SYS_prctl		157
#define SYS_futex		202

#define SI_TKILL		-6
#define PR_SET_NO_NEW_PRIVS	38
#define FUTEX_WAKE_PRIVATE	129

// The synchronous faults: SIGILL 4, SIGTRAP 5, SIGBUS 7, SIGFPE 8,
// SIGSEGV 11, SIGSYS 31.
#define FAULTS	$0x800009b0

TEXT fwdHandler<>(SB),NOSPLIT|NOFRAME,$0
	// A fault the kernel raised for the init's own instruction (si_code > 0)
	// ends the init: returning would only fault again.
	MOVL	8(SI), AX		// siginfo.si_code
	CMPL	AX, $0
	JLE	sent
	MOVL	FAULTS, AX		// zero-extended
	BTQ	DI, AX
	JCS	fault
sent:
	MOVL	DI, R8			// the signal
	MOVL	$SYS_gettid, AX
	SYSCALL
	MOVL	·fwdTid(SB), R9
	CMPL	AX, R9
	JNE	redirect
	// On the exec thread: to the tool, or held until it runs.
	MOVL	·fwdPid(SB), DI
	TESTL	DI, DI
	JEQ	hold
	MOVL	R8, SI
	MOVL	$SYS_kill, AX
	SYSCALL
	RET
hold:
	LEAL	-1(R8), CX
	MOVQ	$1, AX
	SHLQ	CX, AX
	LOCK
	ORQ	AX, ·fwdPending(SB)
	RET
redirect:
	// The init's own tgkill of dropSig to this thread (si_pid 1 and
	// SI_TKILL, which no other process can claim: rt_tgsigqueueinfo(2)
	// refuses SI_TKILL from another process): drop this thread's
	// credentials (startDrop).
	CMPL	R8, $64
	JNE	raise
	CMPL	8(SI), $SI_TKILL
	JNE	raise
	CMPL	16(SI), $1		// siginfo.si_pid
	JEQ	drop
raise:
	// Another thread of the init: raise it again on the exec thread, the
	// only one whose kill(2) passes the permission check.
	MOVL	$1, DI			// the init is pid 1 of its namespace
	MOVL	R9, SI
	MOVL	R8, DX
	MOVL	$SYS_tgkill, AX
	SYSCALL
	RET
drop:
	// What the exec thread did to itself (switchIdentity, dropPrivileges),
	// in the same order: groups, gid and uid while CAP_SETGID and
	// CAP_SETUID are still held, then every capability set, then
	// no_new_privs. A failure is recorded; the thread is counted either way.
	MOVL	·dropGroups(SB), AX
	TESTL	AX, AX
	JEQ	gid
	XORL	DI, DI
	XORL	SI, SI
	MOVL	$SYS_setgroups, AX
	SYSCALL
	TESTQ	AX, AX
	JEQ	gid
	// A thread cloned from the exec thread after its own drop has no
	// CAP_SETGID left, and no supplementary group either: that is fine.
	XORL	DI, DI
	XORL	SI, SI
	MOVL	$SYS_getgroups, AX
	SYSCALL
	TESTQ	AX, AX
	JNE	failed
gid:
	MOVL	·dropGID(SB), DI
	MOVL	DI, SI
	MOVL	DI, DX
	MOVL	$SYS_setresgid, AX
	SYSCALL
	TESTQ	AX, AX
	JNE	failed
	MOVL	·dropUID(SB), DI
	MOVL	DI, SI
	MOVL	DI, DX
	MOVL	$SYS_setresuid, AX
	SYSCALL
	TESTQ	AX, AX
	JNE	failed
	LEAQ	·dropCapHdr(SB), DI
	LEAQ	·dropCapData(SB), SI
	MOVL	$SYS_capset, AX
	SYSCALL
	TESTQ	AX, AX
	JNE	failed
	MOVL	$PR_SET_NO_NEW_PRIVS, DI
	MOVL	$1, SI
	XORL	DX, DX
	XORL	R10, R10
	XORL	R8, R8
	MOVL	$SYS_prctl, AX
	SYSCALL
	TESTQ	AX, AX
	JEQ	ack
failed:
	MOVL	$1, ·dropFailed(SB)
ack:
	LOCK
	INCL	·dropAcks(SB)
	LEAQ	·dropAcks(SB), DI
	MOVL	$FUTEX_WAKE_PRIVATE, SI
	MOVL	$1, DX
	MOVL	$SYS_futex, AX
	SYSCALL
	RET
fault:
	ADDL	$128, DI
	MOVL	$SYS_exit_group, AX
	SYSCALL
	INT	$3

// fwdRestorer returns from the handler (SA_RESTORER is mandatory on amd64).
TEXT fwdRestorer<>(SB),NOSPLIT|NOFRAME,$0
	MOVL	$SYS_rt_sigreturn, AX
	SYSCALL
	INT	$3

DATA ·fwdHandlerPC+0(SB)/8, $fwdHandler<>(SB)
GLOBL ·fwdHandlerPC(SB), RODATA, $8
DATA ·fwdRestorerPC+0(SB)/8, $fwdRestorer<>(SB)
GLOBL ·fwdRestorerPC(SB), RODATA, $8
