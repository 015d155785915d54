//go:build linux && cgo

// The join of a pod's user namespace (WithJoin of a user namespace,
// userjoin_linux.go), in a constructor of the sandbox init, before the Go
// runtime starts: setns(2) refuses CLONE_NEWUSER to a multi-threaded
// caller (EINVAL, kernel/user_namespace.c userns_install), and the Go
// runtime has threads before any Go code runs. runc joins in C before its
// runtime for the same reason (libcontainer/nsenter/nsexec.c); this code
// is moat's own.
//
// The launcher clones the init in a new pid namespace only, still root of
// the launcher's user namespace, with _MOAT_USERNS=<fd>:<flags>:<proc>:<caps>:
//   - proc 1: the init is pid 1 of a new pid namespace, which belongs to
//     the launcher's user namespace, so once in the pod's the init can no
//     longer mount a procfs of it (fs/proc/root.c proc_fill_super checks
//     CAP_SYS_ADMIN over the pid namespace's owner). It makes a detached
//     one first (fsopen/fsmount, which need CAP_SYS_ADMIN over the mount
//     namespace it is still in, the launcher's) and leaves it at <fd> in
//     place of the user namespace's descriptor, where the Go init takes
//     the procfs of a joined pid namespace (init_linux.go, w.Proc);
//   - then setns(<fd>, CLONE_NEWUSER), which gives it every capability in
//     the pod's user namespace and none outside (user_namespaces(7));
//   - then unshare(<flags>): a mount namespace always and the ipc, uts and
//     net namespaces the sandbox does not join, created now so that they
//     belong to the pod's user namespace (NS_GET_USERNS says so);
//   - then its capabilities, a full set in the pod's user namespace after
//     the join, are cut to <caps> (privs_linux.go initCapsFor), raised as
//     ambient as the launcher's clone does in the other case (the
//     launcher cannot here: they need not all be its own, and the Go
//     child raises them before the exec, still in the launcher's user
//     namespace), and the parent-death signal, which a change of
//     credentials may clear (kernel/cred.c commit_creds), is armed again.
// Any failure is kept for the Go init, which reports it as a SetupError
// of step join before it does anything else (userjoin_cgo_linux.go): the
// init never runs on in the launcher's user namespace.

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <linux/capability.h>

#include "userns.h"

#ifndef CLONE_NEWCGROUP
#define CLONE_NEWCGROUP 0x02000000
#endif
#ifndef PR_CAP_AMBIENT
#define PR_CAP_AMBIENT 47
#define PR_CAP_AMBIENT_IS_SET 1
#define PR_CAP_AMBIENT_RAISE 2
#endif
// linux/mount.h, spelled out: it clashes with glibc's sys/mount.h on some
// systems, and nothing else of it is needed.
#define MOAT_FSOPEN_CLOEXEC 0x00000001
#define MOAT_FSCONFIG_SET_STRING 1
#define MOAT_FSCONFIG_CMD_CREATE 6
#define MOAT_FSMOUNT_CLOEXEC 0x00000001
#define MOAT_MOUNT_ATTR_NOSUID 0x00000002
#define MOAT_MOUNT_ATTR_NODEV 0x00000004
#define MOAT_MOUNT_ATTR_NOEXEC 0x00000008
#ifndef __NR_fsopen
#define __NR_fsopen 430
#define __NR_fsconfig 431
#define __NR_fsmount 432
#endif

#define MOAT_USERNS_ENV "_MOAT_USERNS="
#define MOAT_USERNS_ARGV0 "moat-sandbox-init"
#define MOAT_USERNS_FLAGS (CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWNET)

static int moat_userns_state;
static int moat_userns_errno;
static const char *moat_userns_what = "";

int moat_userns_result(int *err, const char **what) {
	*err = moat_userns_errno;
	*what = moat_userns_what;
	return moat_userns_state;
}

static void moat_userns_fail(const char *what, int err) {
	moat_userns_state = -1;
	moat_userns_what = what;
	moat_userns_errno = err ? err : EIO;
}

// moat_userns_num parses one decimal field of at most 20 digits, no sign,
// no leading zero, no overflow, ending at sep; *s moves past the
// separator.
static int moat_userns_num(const char **s, char sep, unsigned long long *out) {
	const char *p = *s;
	unsigned long long v = 0;
	int n = 0;
	if (*p == '0' && p[1] != sep)
		return -1;
	for (; *p >= '0' && *p <= '9'; p++, n++) {
		unsigned long long d = (unsigned long long)(*p - '0');
		if (v > (~0ull - d) / 10)
			return -1;
		v = v * 10 + d;
	}
	if (n == 0 || *p != sep)
		return -1;
	*s = p + (sep ? 1 : 0);
	*out = v;
	return 0;
}

// moat_userns_proc makes a detached procfs of the caller's pid namespace.
static int moat_userns_proc(void) {
	int fs = (int)syscall(__NR_fsopen, "proc", MOAT_FSOPEN_CLOEXEC);
	if (fs < 0)
		return -1;
	if (syscall(__NR_fsconfig, fs, MOAT_FSCONFIG_SET_STRING, "source", "proc", 0) < 0 ||
	    syscall(__NR_fsconfig, fs, MOAT_FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0) {
		int e = errno;
		close(fs);
		errno = e;
		return -1;
	}
	int m = (int)syscall(__NR_fsmount, fs, MOAT_FSMOUNT_CLOEXEC, MOAT_MOUNT_ATTR_NOSUID | MOAT_MOUNT_ATTR_NODEV | MOAT_MOUNT_ATTR_NOEXEC);
	int e = errno;
	close(fs);
	errno = e;
	return m;
}

int moat_userns_parse(const char *v, unsigned long long out[4]) {
	unsigned long long fd, flags, proc, keep;
	if (moat_userns_num(&v, ':', &fd) != 0 || moat_userns_num(&v, ':', &flags) != 0 ||
	    moat_userns_num(&v, ':', &proc) != 0 || moat_userns_num(&v, '\0', &keep) != 0 ||
	    fd < 3 || fd > 1u << 20 || proc > 1 ||
	    (flags & ~(unsigned long long)MOAT_USERNS_FLAGS) != 0 || (flags & CLONE_NEWNS) == 0)
		return -1;
	out[0] = fd, out[1] = flags, out[2] = proc, out[3] = keep;
	return 0;
}

static void moat_userns_join(const char *v) {
	unsigned long long a[4];
	if (moat_userns_parse(v, a) != 0) {
		moat_userns_fail("_MOAT_USERNS is not <fd>:<flags>:<proc>:<caps>", EINVAL);
		return;
	}
	unsigned long long fd = a[0], flags = a[1], proc = a[2], keep = a[3];
	int deathsig = 0;
	if (prctl(PR_GET_PDEATHSIG, &deathsig, 0, 0, 0) != 0) {
		moat_userns_fail("PR_GET_PDEATHSIG", errno);
		return;
	}
	pid_t ppid = getppid();
	int procfd = -1;
	if (proc) {
		if (getpid() != 1) {
			moat_userns_fail("a procfs of its own pid namespace, which the init is not pid 1 of", EINVAL);
			return;
		}
		if ((procfd = moat_userns_proc()) < 0) {
			moat_userns_fail("make a procfs of the new pid namespace before the join (fsopen, fsmount)", errno);
			return;
		}
	}
	if (setns((int)fd, CLONE_NEWUSER) != 0) {
		moat_userns_fail("setns CLONE_NEWUSER into the pod's user namespace", errno);
		return;
	}
	if (unshare((int)flags) != 0) {
		moat_userns_fail("unshare the sandbox's own mount, ipc, uts and net namespaces in the joined user namespace", errno);
		return;
	}
	struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
	struct __user_cap_data_struct d[2];
	memset(d, 0, sizeof d);
	for (int i = 0; i < 2; i++) {
		__u32 part = (__u32)(keep >> (32 * i));
		d[i].effective = d[i].permitted = d[i].inheritable = part;
	}
	if (syscall(SYS_capset, &h, d) != 0) {
		moat_userns_fail("capset the init's capabilities after the join", errno);
		return;
	}
	for (int c = 0; c < 64; c++) {
		if ((keep >> c & 1) && prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, c, 0, 0) != 0) {
			moat_userns_fail("raise the init's ambient capabilities after the join", errno);
			return;
		}
	}
	if (deathsig != 0) {
		if (prctl(PR_SET_PDEATHSIG, deathsig, 0, 0, 0) != 0) {
			moat_userns_fail("PR_SET_PDEATHSIG after the join", errno);
			return;
		}
		if (getppid() != ppid) {
			moat_userns_fail("the launcher went away during the join", ESRCH);
			return;
		}
	}
	if (procfd >= 0) {
		// dup3 without O_CLOEXEC, as the launcher's descriptors are.
		if (dup3(procfd, (int)fd, 0) < 0) {
			moat_userns_fail("place the procfs", errno);
			return;
		}
		close(procfd);
	} else {
		close((int)fd);
	}
	moat_userns_state = 1;
}

// moat_userns_ctor runs in every start of a binary that links nsexec with
// cgo; it acts only in a sandbox init whose environment names a user
// namespace to join, and takes that variable out of it.
__attribute__((constructor)) static void moat_userns_ctor(int argc, char **argv, char **envp) {
	if (argc != 1 || argv == NULL || argv[0] == NULL || strcmp(argv[0], MOAT_USERNS_ARGV0) != 0 || envp == NULL)
		return;
	const char *v = NULL;
	for (char **e = envp; *e != NULL; e++) {
		if (strncmp(*e, MOAT_USERNS_ENV, strlen(MOAT_USERNS_ENV)) == 0) {
			if (v != NULL) {
				moat_userns_fail("_MOAT_USERNS is set twice", EINVAL);
				unsetenv("_MOAT_USERNS");
				return;
			}
			v = *e + strlen(MOAT_USERNS_ENV);
		}
	}
	if (v == NULL)
		return;
	moat_userns_join(v);
	unsetenv("_MOAT_USERNS");
}
