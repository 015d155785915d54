// The thread broadcast (threads.c), as threads_cgo_linux.go calls it.
#ifndef MOAT_THREADS_H
#define MOAT_THREADS_H

#include <sys/types.h>

// moat_bc_set sets call i of the broadcast (0, or -1 past the table's end);
// moat_bc_target the state that lets a thread already in it be (check 0:
// none); moat_broadcast makes the calls on every thread, the calling one
// last: 0, or an errno with the thread (0: the calling one or none) and the
// index of the failed call (-1: none).
int moat_bc_set(int i, long nr, unsigned long a0, unsigned long a1, unsigned long a2, unsigned long a3, unsigned long a4);
void moat_bc_target(int check, unsigned uid, unsigned gid, int ngroups, const unsigned *groups, int lastcap, int secbits,
		    unsigned long long prm, unsigned long long inh, unsigned long long bnd, unsigned long long amb);
// moat_bc_taskdir names the directory the threads are listed from: a
// descriptor of a task directory, or -1 for /proc/self/task.
void moat_bc_taskdir(int fd);
int moat_broadcast(int sig, int timeout_ms, pid_t *bad_tid, int *bad_call);

#endif
