//go:build linux && cgo

// A broadcast of system calls to every thread of the init, for a build
// with cgo, where the Go runtime's own (AllThreadsSyscall) refuses to run:
// each other thread gets a signal whose handler makes the calls on it and
// records the outcome, then this thread makes them. threads_linux.go says
// why; glibc's set*id broadcast (nptl/nptl_setxid.c) and libcap's psx do
// the same, and neither can be asked for capset or prctl.
//
// Threads are found in /proc/self/task (the sandbox's procfs, mounted by
// then), or, in a sandbox with no procfs (Config.NoProc), in the
// directory moat_bc_taskdir names: the init's own task directory in the
// procfs of the pid namespace it was born from, opened before the pivot
// (noproc_linux.go). The Go runtime may start a thread meanwhile, born with the
// privileges of whichever thread made it, so the scan repeats until one
// finds no thread it has not signalled. A signal from anyone else that
// lands on the handler meanwhile is raised again, to the Go runtime's own
// handler, once that is back.

#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/prctl.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>
#include <linux/capability.h>

#include "threads.h"

#define MOAT_BC_CALLS 96
#define MOAT_BC_THREADS 1024

struct moat_bc_call {
	long nr;
	unsigned long a[5];
};

static struct moat_bc_call moat_bc_calls[MOAT_BC_CALLS];
static int moat_bc_ncalls;
static pid_t moat_bc_pid;
static pid_t moat_bc_tids[MOAT_BC_THREADS];
// 0 while a thread has not answered; then 1, or -(errno) with the failed
// call's index in moat_bc_failed.
static int moat_bc_state[MOAT_BC_THREADS];
static int moat_bc_failed[MOAT_BC_THREADS];
static int moat_bc_n;
static volatile sig_atomic_t moat_bc_foreign;

int moat_bc_set(int i, long nr, unsigned long a0, unsigned long a1, unsigned long a2, unsigned long a3, unsigned long a4) {
	if (i < 0 || i >= MOAT_BC_CALLS)
		return -1;
	moat_bc_calls[i] = (struct moat_bc_call){nr, {a0, a1, a2, a3, a4}};
	moat_bc_ncalls = i + 1;
	return 0;
}

// The state the privilege drop leaves a thread in (moat_bc_target), for a
// thread that is in it already: one the runtime made from a thread that had
// dropped is born that way, and would fail the calls that need a
// capability (setgroups, the bounding set, securebits) with EPERM.
static int moat_bc_check;
static uid_t moat_bc_uid;
static gid_t moat_bc_gid;
static int moat_bc_ngroups; // -1: the groups are not set
static gid_t moat_bc_groups[32]; // the first 32, compared when there are no more
static int moat_bc_lastcap;
static int moat_bc_secbits;
static unsigned long long moat_bc_prm, moat_bc_inh, moat_bc_bnd, moat_bc_amb;

void moat_bc_target(int check, unsigned uid, unsigned gid, int ngroups, const unsigned *groups, int lastcap, int secbits,
		    unsigned long long prm, unsigned long long inh, unsigned long long bnd, unsigned long long amb) {
	moat_bc_check = check;
	moat_bc_uid = uid;
	moat_bc_gid = gid;
	moat_bc_ngroups = ngroups;
	for (int i = 0; i < ngroups && i < 32; i++)
		moat_bc_groups[i] = groups[i];
	moat_bc_lastcap = lastcap;
	moat_bc_secbits = secbits;
	moat_bc_prm = prm;
	moat_bc_inh = inh;
	moat_bc_bnd = bnd;
	moat_bc_amb = amb;
}

// moat_bc_done says whether the calling thread is in the target state
// already. Async-signal-safe: system calls only.
static int moat_bc_done(void) {
	if (!moat_bc_check)
		return 0;
	uid_t r, e, s;
	gid_t gr, ge, gs;
	if (getresuid(&r, &e, &s) != 0 || r != moat_bc_uid || e != moat_bc_uid || s != moat_bc_uid)
		return 0;
	if (getresgid(&gr, &ge, &gs) != 0 || gr != moat_bc_gid || ge != moat_bc_gid || gs != moat_bc_gid)
		return 0;
	if (moat_bc_ngroups >= 0) {
		if (moat_bc_ngroups <= 32) {
			gid_t g[32];
			if (getgroups(32, g) != moat_bc_ngroups)
				return 0;
			for (int i = 0; i < moat_bc_ngroups; i++)
				if (g[i] != moat_bc_groups[i])
					return 0;
		} else if (getgroups(0, NULL) != moat_bc_ngroups)
			return 0;
	}
	struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
	struct __user_cap_data_struct d[2];
	if (syscall(SYS_capget, &h, d) != 0)
		return 0;
	unsigned long long eff = d[0].effective | (unsigned long long)d[1].effective << 32;
	unsigned long long prm = d[0].permitted | (unsigned long long)d[1].permitted << 32;
	unsigned long long inh = d[0].inheritable | (unsigned long long)d[1].inheritable << 32;
	if (eff != 0 || prm != moat_bc_prm || inh != moat_bc_inh)
		return 0;
	for (int c = 0; c <= moat_bc_lastcap; c++) {
		if (prctl(PR_CAPBSET_READ, c, 0, 0, 0) != (int)(moat_bc_bnd >> c & 1))
			return 0;
		if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_IS_SET, c, 0, 0) != (int)(moat_bc_amb >> c & 1))
			return 0;
	}
	return prctl(PR_GET_SECUREBITS, 0, 0, 0, 0) == moat_bc_secbits && prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) == 1;
}

// moat_bc_run makes every call on the calling thread, unless it is in the
// target state already: 0, or the errno with the failed call's index in
// *failed. Async-signal-safe.
static int moat_bc_run(int *failed) {
	if (moat_bc_done())
		return 0;
	for (int i = 0; i < moat_bc_ncalls; i++) {
		struct moat_bc_call *c = &moat_bc_calls[i];
		if (syscall(c->nr, c->a[0], c->a[1], c->a[2], c->a[3], c->a[4]) < 0) {
			*failed = i;
			return errno;
		}
	}
	return 0;
}

static void moat_bc_handler(int sig, siginfo_t *si, void *uc) {
	(void)sig; // SA_SIGINFO's signature; the signal is broadcastSignal
	(void)uc;
	int saved = errno;
	// Only a tgkill(2) of this process is the broadcast's.
	if (si->si_code != SI_TKILL || si->si_pid != moat_bc_pid) {
		moat_bc_foreign = 1;
		errno = saved;
		return;
	}
	pid_t tid = (pid_t)syscall(SYS_gettid);
	int n = __atomic_load_n(&moat_bc_n, __ATOMIC_ACQUIRE);
	for (int i = 0; i < n; i++) {
		if (moat_bc_tids[i] != tid)
			continue;
		int failed = -1;
		int e = moat_bc_run(&failed);
		moat_bc_failed[i] = failed;
		__atomic_store_n(&moat_bc_state[i], e == 0 ? 1 : -e, __ATOMIC_RELEASE);
		break;
	}
	errno = saved;
}

static int moat_bc_known(pid_t tid) {
	for (int i = 0; i < moat_bc_n; i++)
		if (moat_bc_tids[i] == tid)
			return 1;
	return 0;
}

// moat_bc_dir is the task directory's descriptor, -1 for /proc/self/task.
static int moat_bc_dir = -1;

void moat_bc_taskdir(int fd) { moat_bc_dir = fd; }

static DIR *moat_bc_tasks(void) {
	if (moat_bc_dir < 0)
		return opendir("/proc/self/task");
	// A descriptor of its own: its offset is not moat_bc_dir's.
	int fd = openat(moat_bc_dir, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	DIR *d = fdopendir(fd);
	if (d == NULL)
		close(fd);
	return d;
}

static int moat_bc_alive(pid_t tid) {
	char p[64];
	struct stat st;
	if (moat_bc_dir >= 0) {
		snprintf(p, sizeof p, "%d", (int)tid);
		return fstatat(moat_bc_dir, p, &st, 0) == 0;
	}
	snprintf(p, sizeof p, "/proc/self/task/%d", (int)tid);
	return stat(p, &st) == 0;
}

// moat_bc_wait waits until every signalled thread answered (a thread that
// has gone counts as done) or the deadline passed: 0, ETIMEDOUT, or a
// thread's errno, with the thread and the call.
static int moat_bc_wait(const struct timespec *deadline, pid_t *bad_tid, int *bad_call) {
	for (unsigned spins = 0;; spins++) {
		int pending = 0;
		for (int i = 0; i < moat_bc_n; i++) {
			int s = __atomic_load_n(&moat_bc_state[i], __ATOMIC_ACQUIRE);
			if (s < 0) {
				*bad_tid = moat_bc_tids[i];
				*bad_call = moat_bc_failed[i];
				return -s;
			}
			if (s == 0)
				pending++;
		}
		if (pending == 0)
			return 0;
		struct timespec now;
		clock_gettime(CLOCK_MONOTONIC, &now);
		int late = now.tv_sec > deadline->tv_sec || (now.tv_sec == deadline->tv_sec && now.tv_nsec >= deadline->tv_nsec);
		if (late || (spins >= 1024 && spins % 64 == 63)) {
			for (int i = 0; i < moat_bc_n; i++) {
				if (__atomic_load_n(&moat_bc_state[i], __ATOMIC_ACQUIRE) != 0 || moat_bc_alive(moat_bc_tids[i]))
					continue;
				__atomic_store_n(&moat_bc_state[i], 1, __ATOMIC_RELEASE);
			}
		}
		if (late) {
			for (int i = 0; i < moat_bc_n; i++) {
				if (__atomic_load_n(&moat_bc_state[i], __ATOMIC_ACQUIRE) == 0) {
					*bad_tid = moat_bc_tids[i];
					*bad_call = -1;
					return ETIMEDOUT;
				}
			}
			return 0;
		}
		// Yield first: the threads are runnable at once, and a sleep
		// costs its timer slack (50 µs by default) each time.
		if (spins < 1024) {
			sched_yield();
			continue;
		}
		struct timespec nap = {0, 20 * 1000};
		nanosleep(&nap, NULL);
	}
}

// moat_broadcast makes the calls set with moat_bc_set on every thread of
// the process, the calling one last: 0, or an errno with the thread (0: the
// calling one or none) and the index of the failed call (-1: none).
int moat_broadcast(int sig, int timeout_ms, pid_t *bad_tid, int *bad_call) {
	*bad_tid = 0;
	*bad_call = -1;
	struct sigaction sa, old;
	memset(&sa, 0, sizeof sa);
	sa.sa_sigaction = moat_bc_handler;
	sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART;
	sigfillset(&sa.sa_mask);
	moat_bc_pid = getpid();
	moat_bc_n = 0;
	moat_bc_foreign = 0;
	if (sigaction(sig, &sa, &old) != 0)
		return errno;
	pid_t self = (pid_t)syscall(SYS_gettid);
	struct timespec deadline;
	clock_gettime(CLOCK_MONOTONIC, &deadline);
	deadline.tv_sec += timeout_ms / 1000;
	deadline.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
	if (deadline.tv_nsec >= 1000000000L) {
		deadline.tv_sec++;
		deadline.tv_nsec -= 1000000000L;
	}
	int err = 0;
	for (;;) {
		DIR *d = moat_bc_tasks();
		if (d == NULL) {
			err = errno;
			break;
		}
		int added = 0;
		struct dirent *de;
		while (err == 0 && (de = readdir(d)) != NULL) {
			if (de->d_name[0] == '.')
				continue;
			pid_t tid = (pid_t)atoi(de->d_name);
			if (tid <= 0 || tid == self || moat_bc_known(tid))
				continue;
			if (moat_bc_n == MOAT_BC_THREADS) {
				err = EMFILE;
				break;
			}
			int i = moat_bc_n;
			moat_bc_tids[i] = tid;
			moat_bc_state[i] = 0;
			moat_bc_failed[i] = -1;
			__atomic_store_n(&moat_bc_n, i + 1, __ATOMIC_RELEASE);
			added++;
			if (syscall(SYS_tgkill, moat_bc_pid, tid, sig) != 0) {
				if (errno != ESRCH) {
					*bad_tid = tid;
					err = errno;
					break;
				}
				__atomic_store_n(&moat_bc_state[i], 1, __ATOMIC_RELEASE); // gone
			}
		}
		closedir(d);
		if (err != 0 || added == 0)
			break;
		if ((err = moat_bc_wait(&deadline, bad_tid, bad_call)) != 0)
			break;
	}
	if (err == 0) {
		int failed = -1;
		if ((err = moat_bc_run(&failed)) != 0)
			*bad_call = failed;
	}
	sigaction(sig, &old, NULL);
	if (moat_bc_foreign)
		kill(moat_bc_pid, sig);
	return err;
}
