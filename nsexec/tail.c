//go:build linux && cgo

// The init's tail: the part of the sandbox init that stays pid 1 once the
// setup is done, in C, so that the process that waits for a pooled
// sandbox's request, starts the tool and supervises it carries no Go
// runtime: no threads, no signal subscription round trips, a few pages of
// memory and a one-thread exit (issue 19). tail_linux.go says what the Go
// side hands over and why; this code only ever runs in an exec of the
// launcher's binary whose one environment variable names it, from a
// constructor, before the Go runtime starts, and never returns there.
//
// Its inputs are its one environment variable (descriptor numbers and the
// filter's length), the descriptors the Go side left open (the sync socket,
// the filter's memfd), the request, which it checks as strictly as the
// Go decoder (moat_parse_request, tail_wire.c; TestTailRequestParser and
// FuzzWireRequest compare both), and once the tool runs the launcher's exec
// requests (tail_exec.h; TestExecParsers and FuzzWireExec).

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/signalfd.h>

#include "tail.h"

#define MOAT_EXIT_SETUP 125
#define MOAT_EXIT_GONE 137
#define MOAT_MAX_FRAME (16u << 20)
#define MOAT_INIT_ARGV0 "moat-sandbox-init"
#define MOAT_DEFAULT_PATH "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

static int moat_sync = -1;

// moat_send writes all of b to the sync socket, without SIGPIPE (every
// signal is blocked here, and a pending SIGPIPE would be forwarded to the
// tool as if someone had sent it).
static int moat_send(const void *b, size_t n) {
	const char *p = b;
	while (n > 0) {
		ssize_t w = send(moat_sync, p, n, MSG_NOSIGNAL);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

struct moat_buf {
	char b[32768];
	size_t n;
};

static void moat_put(struct moat_buf *b, const char *s, size_t n) {
	if (n > sizeof b->b - b->n)
		n = sizeof b->b - b->n;
	memcpy(b->b + b->n, s, n);
	b->n += n;
}

// moat_json_str appends s as a JSON string, at most 4096 bytes of it.
static void moat_json_str(struct moat_buf *b, const char *s) {
	static const char hex[] = "0123456789abcdef";
	moat_put(b, "\"", 1);
	for (size_t i = 0; s[i] != 0 && i < 4096; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c == '"' || c == '\\') {
			char e[2] = {'\\', (char)c};
			moat_put(b, e, 2);
		} else if (c < 0x20) {
			char e[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
			moat_put(b, e, 6);
		} else {
			moat_put(b, (const char *)&c, 1);
		}
	}
	moat_put(b, "\"", 1);
}

// moat_fail sends msgError and the report the Go side's decodeReport
// reads (wire_linux.go), and exits 125, as the Go init's fail does.
static void moat_fail(int step, const char *path, int err, const char *detail) {
	static struct moat_buf b;
	char num[40];
	b.n = 0;
	moat_put(&b, "E{\"step\":", 9);
	moat_put(&b, num, (size_t)snprintf(num, sizeof num, "%d", step));
	if (path != NULL && path[0] != 0) {
		moat_put(&b, ",\"path\":", 8);
		moat_json_str(&b, path);
	}
	if (err != 0)
		moat_put(&b, num, (size_t)snprintf(num, sizeof num, ",\"errno\":%d", err));
	if (detail != NULL && detail[0] != 0) {
		moat_put(&b, ",\"detail\":", 10);
		moat_json_str(&b, detail);
	}
	moat_put(&b, "}", 1);
	moat_send(b.b, b.n);
	_exit(MOAT_EXIT_SETUP);
}

// moat_parse_uint parses a decimal no larger than max.
static int moat_parse_uint(const char *s, unsigned long max, unsigned long *out) {
	unsigned long v = 0;
	if (s == NULL || s[0] == 0)
		return -1;
	for (; *s != 0; s++) {
		if (*s < '0' || *s > '9')
			return -1;
		v = v * 10 + (unsigned long)(*s - '0');
		if (v > max)
			return -1;
	}
	*out = v;
	return 0;
}

static int moat_read_full(int fd, void *b, size_t n) {
	char *p = b;
	while (n > 0) {
		ssize_t r = read(fd, p, n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			if (r == 0)
				errno = 0;
			return -1;
		}
		p += r;
		n -= (size_t)r;
	}
	return 0;
}

// moat_request_vec checks a request body and returns its argv and env
// (moat_parse_request's layout), or reports the refusal.
static char **moat_request_vec(char *body, size_t n) {
	size_t cap = n + 2, argc;
	char **vec = calloc(cap, sizeof *vec);
	if (vec == NULL)
		moat_fail(MOAT_STEP_CONFIG, "", ENOMEM, "request");
	const char *why = moat_parse_request(body, n, vec, cap, &argc);
	if (why != NULL) {
		char detail[128];
		snprintf(detail, sizeof detail, "request: the request frame %s", why);
		moat_fail(MOAT_STEP_CONFIG, "", EINVAL, detail);
	}
	return vec;
}

// moat_await says the sandbox is ready and reads its one request: the
// length, with the tool's three stdio descriptors on its first byte, then
// the body. A launcher that closes the socket instead ends the sandbox
// quietly, as the Go init's await does.
static char **moat_await(int free_fd) {
	unsigned char hdr[4];
	int fds[3], nfds = 0;
	size_t got = 0;
	// The wait runs under the policy's filter: before it says ready, the
	// tail makes sure the filter lets it receive the request (recvmsg,
	// read, dup3, close) and supervise the tool (poll, wait4, kill), so
	// that a policy that refuses one fails Prepare with the reason, not a
	// sandbox that dies waiting or with its tool.
	{
		char c;
		struct iovec iov = {&c, 1};
		struct msghdr mh;
		memset(&mh, 0, sizeof mh);
		mh.msg_iov = &iov;
		mh.msg_iovlen = 1;
		if (recvmsg(moat_sync, &mh, MSG_PEEK | MSG_DONTWAIT) < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
			moat_fail(MOAT_STEP_CONFIG, "", errno, "request: recvmsg (the policy's filter must allow it)");
		if (read(moat_sync, &c, 0) < 0)
			moat_fail(MOAT_STEP_CONFIG, "", errno, "request: read (the policy's filter must allow it)");
		int t = dup3(moat_sync, free_fd, O_CLOEXEC);
		if (t < 0)
			moat_fail(MOAT_STEP_FDS, "", errno, "request: dup3 (the policy's filter must allow it)");
		if (close(t) != 0)
			moat_fail(MOAT_STEP_FDS, "", errno, "request: close (the policy's filter must allow it)");
		// And what supervising the tool takes, so that a refusal is not a
		// tail that dies with the tool already running.
		if (poll(NULL, 0, 0) < 0)
			moat_fail(MOAT_STEP_EXEC, "", errno, "supervise: poll (the policy's filter must allow it)");
		if (waitpid(-1, NULL, WNOHANG) < 0 && errno != ECHILD)
			moat_fail(MOAT_STEP_EXEC, "", errno, "supervise: wait4 (the policy's filter must allow it)");
		if (kill(getpid(), 0) < 0)
			moat_fail(MOAT_STEP_EXEC, "", errno, "supervise: kill (the policy's filter must allow it)");
	}
	if (moat_send("R", 1) != 0)
		_exit(MOAT_EXIT_SETUP);
	while (got < sizeof hdr) {
		union {
			char buf[CMSG_SPACE(3 * sizeof(int))];
			struct cmsghdr align;
		} ctl;
		struct iovec iov = {hdr + got, sizeof hdr - got};
		struct msghdr mh;
		memset(&mh, 0, sizeof mh);
		mh.msg_iov = &iov;
		mh.msg_iovlen = 1;
		mh.msg_control = ctl.buf;
		mh.msg_controllen = sizeof ctl.buf;
		ssize_t r = recvmsg(moat_sync, &mh, MSG_CMSG_CLOEXEC);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 && errno == ECONNRESET)
			_exit(MOAT_EXIT_SETUP);
		if (r < 0)
			moat_fail(MOAT_STEP_CONFIG, "", errno, "request: recvmsg");
		for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c != NULL; c = CMSG_NXTHDR(&mh, c)) {
			if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
				continue;
			size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
			int *in = (int *)CMSG_DATA(c);
			for (size_t i = 0; i < k; i++) {
				int fd;
				memcpy(&fd, in + i, sizeof fd);
				if (nfds < 3)
					fds[nfds] = fd;
				else
					close(fd);
				nfds++;
			}
		}
		if (mh.msg_flags & MSG_CTRUNC)
			moat_fail(MOAT_STEP_CONFIG, "", EPROTO, "request: more descriptors than the three of stdio");
		if (r == 0)
			_exit(MOAT_EXIT_SETUP);
		got += (size_t)r;
	}
	if (nfds != 3)
		moat_fail(MOAT_STEP_CONFIG, "", EPROTO, "request: it must carry exactly three descriptors");
	uint32_t n = moat_be32(hdr);
	if (n > MOAT_MAX_FRAME)
		moat_fail(MOAT_STEP_CONFIG, "", EMSGSIZE, "request: frame too large");
	char *body = malloc((size_t)n + 1);
	if (body == NULL)
		moat_fail(MOAT_STEP_CONFIG, "", ENOMEM, "request");
	body[n] = 0;
	if (moat_read_full(moat_sync, body, n) != 0) {
		if (errno == 0 || errno == ECONNRESET)
			_exit(MOAT_EXIT_SETUP);
		moat_fail(MOAT_STEP_CONFIG, "", errno, "request: read");
	}
	char **vec = moat_request_vec(body, n);
	for (int i = 0; i < 3; i++) {
		// dup3 without O_CLOEXEC: the copy at 0, 1 or 2 survives the
		// tool's exec; the received one (close-on-exec) goes now.
		if (dup3(fds[i], i, 0) < 0)
			moat_fail(MOAT_STEP_FDS, "", errno, "stdio");
		close(fds[i]);
	}
	return vec;
}

// moat_lookup resolves a bare name against the env's PATH as the Go init's
// lookPath does (exec_linux.go): the last PATH= wins, an empty entry is ".",
// a regular file that is not executable makes the answer EACCES if nothing
// later is found.
static int moat_lookup(const char *name, char *const *envp, char *out, size_t outsz) {
	if (strchr(name, '/') != NULL) {
		if (strlen(name) >= outsz)
			return ENAMETOOLONG;
		strcpy(out, name);
		return 0;
	}
	const char *path = MOAT_DEFAULT_PATH;
	for (char *const *e = envp; *e != NULL; e++)
		if (strncmp(*e, "PATH=", 5) == 0)
			path = *e + 5;
	int denied = 0;
	for (const char *p = path;;) {
		const char *colon = strchr(p, ':');
		size_t dl = colon != NULL ? (size_t)(colon - p) : strlen(p);
		const char *dir = p;
		if (dl == 0) {
			dir = ".";
			dl = 1;
		}
		if (dl + 1 + strlen(name) < outsz) {
			struct stat st;
			memcpy(out, dir, dl);
			out[dl] = '/';
			strcpy(out + dl + 1, name);
			if (stat(out, &st) == 0 && S_ISREG(st.st_mode)) {
				if (access(out, X_OK) == 0)
					return 0;
				denied = 1;
			}
		}
		if (colon == NULL)
			break;
		p = colon + 1;
	}
	return denied ? EACCES : ENOENT;
}

// moat_load_filter installs the policy's filter from the memfd the Go side
// wrote it to. The tail has one thread, so no TSYNC; no_new_privs is set.
static void moat_load_filter(int fd, unsigned long len) {
	if (len == 0)
		return;
	if (len % sizeof(struct sock_filter) != 0 || len / sizeof(struct sock_filter) > BPF_MAXINSNS)
		moat_fail(MOAT_STEP_SECCOMP, "", EINVAL, "filter length");
	struct sock_filter *f = malloc(len);
	if (f == NULL)
		moat_fail(MOAT_STEP_SECCOMP, "", ENOMEM, "");
	if (pread(fd, f, len, 0) != (ssize_t)len)
		moat_fail(MOAT_STEP_SECCOMP, "", errno != 0 ? errno : EIO, "read the filter");
	struct sock_fprog prog = {(unsigned short)(len / sizeof(struct sock_filter)), f};
	if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) != 0)
		moat_fail(MOAT_STEP_SECCOMP, "", errno, "");
	free(f);
}

// Raw masks: glibc's sigset functions refuse or hide 32 and 33, which stay
// blocked here (the Go init forwards neither).
static int moat_sigmask(uint64_t set) {
	return (int)syscall(SYS_rt_sigprocmask, SIG_SETMASK, &set, NULL, sizeof set);
}

// moat_forwarded is the set the tail reads from its signalfd: every signal
// a process can catch but SIGKILL, SIGSTOP, glibc's 32 and 33, and the
// ones ignored at the exec (an inherited SIG_IGN stays ignored, and the
// tool inherits it), as the Go init's forwarded(); plus SIGCHLD, its own.
static uint64_t moat_forwarded(void) {
	uint64_t set = 0;
	for (int s = 1; s <= 64; s++) {
		if (s == SIGKILL || s == SIGSTOP || s == 32 || s == 33)
			continue;
		struct sigaction old;
		if (s != SIGCHLD && sigaction(s, NULL, &old) == 0 && old.sa_handler == SIG_IGN)
			continue;
		set |= 1ULL << (s - 1);
	}
	return set;
}

static pid_t moat_tool = -1;

// moat_reaper: the tail is not pid 1 of its pid namespace (a joined one),
// so it ends what it leaves behind itself, as the Go init's
// endDescendants does (reaper_linux.go says why): the tool's process
// group, then every child it has (the Go side made it the child
// subreaper, which execve keeps), until it has none; never kill(-1).
static int moat_reaper;

static void moat_end_descendants(void) {
	if (!moat_reaper)
		return;
	if (moat_tool > 0)
		kill(-moat_tool, SIGKILL);
	static char buf[65536];
	for (int round = 0; round < 1000; round++) {
		int fd = open("/proc/thread-self/children", O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			return;
		ssize_t n, got = 0;
		while ((n = read(fd, buf + got, sizeof buf - 1 - (size_t)got)) > 0 || (n < 0 && errno == EINTR))
			if (n > 0)
				got += n;
		close(fd);
		buf[got] = 0;
		int any = 0;
		for (char *p = buf; *p != 0;) {
			char *end;
			long pid = strtol(p, &end, 10);
			if (end == p)
				break;
			if (pid > 0) {
				kill((pid_t)pid, SIGKILL);
				any = 1;
			}
			p = end;
		}
		if (!any)
			return;
		while (waitpid(-1, NULL, WNOHANG) > 0)
			;
		struct timespec ms = {0, 1000000};
		nanosleep(&ms, NULL);
	}
}

static void moat_exit_with(int status) {
	unsigned char m[5] = {'X', (unsigned char)(status >> 24), (unsigned char)(status >> 16),
			      (unsigned char)(status >> 8), (unsigned char)status};
	moat_end_descendants();
	moat_send(m, sizeof m);
	_exit(WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status));
}

// moat_leave ends the sandbox without a status to report (the launcher is
// gone, or broke the protocol), first ending what the tail started in a
// joined pid namespace.
static void moat_leave(int code) {
	moat_end_descendants();
	_exit(code);
}

#include "tail_exec.h"

// moat_reap reaps every child that has ended: the tool (then the tail
// reports and exits; the kernel kills what is left in the namespace), the
// processes started on request (tail_exec.h), reported, and orphans
// re-parented to pid 1.
static void moat_reap(void) {
	for (;;) {
		int status;
		pid_t w = waitpid(-1, &status, WNOHANG);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return;
		if (w == moat_tool)
			moat_exit_with(status);
		moat_exec_reaped(w, status);
	}
}

static void moat_close_but(int a, int b) {
	int lo = a < b ? a : b, hi = a < b ? b : a;
	if (lo > 3)
		syscall(SYS_close_range, 3U, (unsigned)lo - 1, 0U);
	if (hi > lo + 1)
		syscall(SYS_close_range, (unsigned)lo + 1, (unsigned)hi - 1, 0U);
	syscall(SYS_close_range, (unsigned)hi + 1, ~0U, 0U);
}

// moat_tail's parameters come in its one environment variable,
// _MOAT_TAIL=SYNC,MEMFD,FILTERLEN,TTY: the sync socket, the memfd holding
// the policy's filter (FILTERLEN bytes; 0 for none), and 1 when the tool's
// stdin becomes its controlling terminal (Config.Terminal), else 0. Its
// argv is the init's alone, so /proc/1/cmdline reads as the Go init's did.
static void moat_tail(const char *params) {
	unsigned long v[4];
	const char *p = params;
	for (int i = 0; i < 4; i++) {
		char num[24];
		if (i > 0 && *p++ != ',')
			_exit(MOAT_EXIT_SETUP);
		size_t l = strcspn(p, ",");
		if (l == 0 || l >= sizeof num)
			_exit(MOAT_EXIT_SETUP);
		memcpy(num, p, l);
		num[l] = 0;
		if (moat_parse_uint(num, MOAT_MAX_FRAME, &v[i]) != 0)
			_exit(MOAT_EXIT_SETUP);
		p += l;
	}
	if (*p != 0)
		_exit(MOAT_EXIT_SETUP);
	// Everything stays blocked (the Go side blocked it before its exec, so
	// nothing was lost in between); what arrives waits in the queue for
	// the signalfd, a signal sent before the tool runs included.
	moat_sigmask(~0ULL);
	prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
	prctl(PR_SET_NAME, (unsigned long)"moat-sandbox-in", 0, 0, 0);
	moat_sync = (int)v[0];
	moat_reaper = getpid() != 1;
	int mfd = (int)v[1];
	unsigned long flen = v[2];
	if (v[3] > 1)
		_exit(MOAT_EXIT_SETUP);
	int tty = (int)v[3];
	// The tool must not inherit the sync socket.
	if (fcntl(moat_sync, F_SETFD, FD_CLOEXEC) != 0)
		_exit(MOAT_EXIT_SETUP);
	// A sandbox granted capabilities (Config.Caps) whose uid is 0 inside
	// got them all in its effective set at this exec, as any root process
	// does; the tail acts with none, and the tool's exec computes its own
	// from the permitted set the tail keeps (threads_linux.go,
	// setCapsWant). capset may always lower the effective set.
	{
		struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
		struct __user_cap_data_struct d[2];
		if (syscall(SYS_capget, &h, d) != 0)
			moat_fail(MOAT_STEP_CAPABILITIES, "", errno, "capget");
		if ((d[0].effective | d[1].effective) != 0) {
			d[0].effective = d[1].effective = 0;
			if (syscall(SYS_capset, &h, d) != 0)
				moat_fail(MOAT_STEP_CAPABILITIES, "", errno, "clear the effective set");
		}
	}
	// What does not depend on the request is done before it, off the
	// dispatch's critical path: the signal queue, and the policy's filter
	// (its JIT alone is about a tenth of a millisecond), under which the
	// tail then waits; moat_await checks first that the filter lets it.
	struct sigaction dfl;
	memset(&dfl, 0, sizeof dfl);
	dfl.sa_handler = SIG_DFL;
	sigaction(SIGCHLD, &dfl, NULL);
	uint64_t fwd = moat_forwarded();
	int sfd = (int)syscall(SYS_signalfd4, -1, &fwd, sizeof fwd, SFD_CLOEXEC);
	if (sfd < 0)
		moat_fail(MOAT_STEP_EXEC, "", errno, "signalfd");
	moat_load_filter(mfd, flen);
	if (flen > 0)
		close(mfd);
	char **targv = moat_await((sfd > moat_sync ? sfd : moat_sync) + 1), **tenv = targv;
	while (*tenv != NULL)
		tenv++;
	tenv++;
	static char path[4096];
	int err = moat_lookup(targv[0], tenv, path, sizeof path);
	if (err != 0)
		moat_fail(MOAT_STEP_EXEC, targv[0], err, "");
	int ep[2];
	if (pipe2(ep, O_CLOEXEC) != 0)
		moat_fail(MOAT_STEP_EXEC, path, errno, "pipe");
	pid_t pid = fork();
	if (pid < 0)
		moat_fail(MOAT_STEP_EXEC, path, errno, "");
	if (pid == 0) {
		// The tool: every signal unblocked, its own session, then the
		// exec; a failure goes back as its errno on the close-on-exec
		// pipe, as Go's ForkExec reports it.
		int e = 0;
		moat_sigmask(0);
		// With a terminal, stdin becomes the new session's controlling
		// terminal, and the session's process group its foreground one
		// (tty_ioctl(4) TIOCSCTTY, from the session leader after setsid;
		// drivers/tty/tty_jobctrl.c tiocsctty), as Go's ForkExec does it
		// for the Go init (Setctty).
		if (setsid() < 0 || (tty && ioctl(0, TIOCSCTTY, 0) < 0))
			e = errno;
		else {
			execve(path, targv, tenv);
			e = errno;
		}
		while (write(ep[1], &e, sizeof e) < 0 && errno == EINTR)
			;
		_exit(127);
	}
	close(ep[1]);
	int e;
	ssize_t r;
	do
		r = read(ep[0], &e, sizeof e);
	while (r < 0 && errno == EINTR);
	if (r == (ssize_t)sizeof e) {
		while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
			;
		moat_fail(MOAT_STEP_EXEC, path, e, "");
	}
	moat_tool = pid;
	// The tool has its stdio; the tail keeps no descriptor of a host file
	// but the sync socket.
	close(0);
	close(1);
	close(2);
	moat_close_but(moat_sync, sfd);
	if (moat_send("S", 1) != 0)
		moat_leave(MOAT_EXIT_GONE);
	struct pollfd pf[2] = {{sfd, POLLIN, 0}, {moat_sync, POLLIN, 0}};
	for (;;) {
		if (poll(pf, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			_exit(MOAT_EXIT_SETUP);
		}
		if (pf[0].revents & POLLIN) {
			struct signalfd_siginfo si[16];
			ssize_t n = read(sfd, si, sizeof si);
			for (ssize_t i = 0; n > 0 && i < n / (ssize_t)sizeof si[0]; i++) {
				if (si[i].ssi_signo == SIGCHLD)
					moat_reap();
				else
					// A signal the tool sent to pid 1 comes back to it;
					// the tail never acts on one itself.
					kill(moat_tool, (int)si[i].ssi_signo);
			}
		}
		if (pf[1].revents & (POLLIN | POLLHUP | POLLERR))
			// A request (tail_exec.h), or the launcher's end closed (it
			// died, or gave up): then the sandbox ends with the tail.
			moat_serve();
	}
}

// The soft RLIMIT_NOFILE the init started with, when the Go runtime is
// about to raise it (syscall's origRlimitNofile): the handover gives it
// back, as ForkExec gives it back to a tool it starts.
static struct rlimit moat_orig_nofile;
static int moat_have_orig_nofile;

// moat_tail_ctor runs before the Go runtime in every process of a binary
// that links nsexec with cgo, and returns at once unless this process is
// the sandbox init: then it notes the descriptor limit, and if it is the
// init's tail (its one environment variable names it) it runs the tail and
// never returns.
__attribute__((constructor)) static void moat_tail_ctor(int argc, char **argv, char **envp) {
	if (argc != 1 || argv == NULL || argv[0] == NULL || strcmp(argv[0], MOAT_INIT_ARGV0) != 0 || envp == NULL)
		return;
	if (envp[0] != NULL && envp[1] == NULL && strncmp(envp[0], "_MOAT_TAIL=", 11) == 0) {
		moat_tail(envp[0] + 11);
		_exit(MOAT_EXIT_SETUP);
	}
	if (getrlimit(RLIMIT_NOFILE, &moat_orig_nofile) == 0 && moat_orig_nofile.rlim_cur < moat_orig_nofile.rlim_max)
		moat_have_orig_nofile = 1;
}

int moat_orig_nofile_get(unsigned long long *cur, unsigned long long *max) {
	*cur = moat_orig_nofile.rlim_cur;
	*max = moat_orig_nofile.rlim_max;
	return moat_have_orig_nofile;
}

// moat_test_lookup runs moat_lookup for tailLookup, with the env as one
// block of NUL-terminated strings.
int moat_test_lookup(const char *name, char *block, size_t n, size_t count, char *out, size_t outsz) {
	char **envp = calloc(count + 1, sizeof *envp);
	if (envp == NULL)
		return ENOMEM;
	char *p = block;
	for (size_t i = 0; i < count && p < block + n; i++) {
		envp[i] = p;
		p += strlen(p) + 1;
	}
	int err = moat_lookup(name, envp, out, outsz);
	free(envp);
	return err;
}

const char *moat_default_path(void) { return MOAT_DEFAULT_PATH; }
