// The C tail's side of the exec protocol (execwire_linux.go): included once,
// by tail.c, after the helpers it uses (moat_send, moat_read_full,
// moat_lookup, moat_sigmask, moat_leave), so that they and this file's own
// stay static to the tail. The tail forks each requested process from its
// one thread, as it forked the tool, so the process has the tool's
// credentials, empty capability sets, securebits, no_new_privs and filter;
// it gets its three stdio descriptors and nothing else of the tail's (every
// other one is close-on-exec).
//
// Its input is the launcher's and is checked as strictly as the Go init
// checks it: moat_parse_exec (tail_wire.c) is decodeExec's twin
// (TestExecParsers and FuzzWireExec compare them).

#define MOAT_MAX_EXECS 1024

static struct {
	uint32_t id;
	pid_t pid;
} moat_execs[MOAT_MAX_EXECS];
static int moat_nexecs;

static void moat_exec_msg(char type, uint32_t id, uint32_t v) {
	unsigned char m[9] = {(unsigned char)type,
			      (unsigned char)(id >> 24), (unsigned char)(id >> 16), (unsigned char)(id >> 8), (unsigned char)id,
			      (unsigned char)(v >> 24), (unsigned char)(v >> 16), (unsigned char)(v >> 8), (unsigned char)v};
	if (moat_send(m, sizeof m) != 0)
		moat_leave(MOAT_EXIT_GONE);
}

// moat_exec_reaped forgets pid if it is an exec'd process and reports its
// status; it returns whether it was one.
static int moat_exec_reaped(pid_t pid, int status) {
	for (int i = 0; i < moat_nexecs; i++) {
		if (moat_execs[i].pid == pid) {
			uint32_t id = moat_execs[i].id;
			moat_execs[i] = moat_execs[--moat_nexecs];
			moat_exec_msg('y', id, (uint32_t)status);
			return 1;
		}
	}
	return 0;
}

static int moat_exec_find(uint32_t id) {
	for (int i = 0; i < moat_nexecs; i++)
		if (moat_execs[i].id == id)
			return i;
	return -1;
}

// moat_exec_start forks one requested process: its own session, its stdio
// (above 2 already: the tail closed 0 to 2 once the tool had them), its
// cwd, then the exec; a failure comes back as its errno on a close-on-exec
// pipe, as for the tool. The stdio descriptors are closed here either way.
static void moat_exec_start(struct moat_exec_hdr *h, char **argv, char **envp, int fds[3]) {
	static char path[4096];
	int err = 0;
	if (moat_nexecs >= MOAT_MAX_EXECS)
		err = EAGAIN;
	else if (moat_exec_find(h->id) >= 0)
		err = EEXIST;
	else
		err = moat_lookup(argv[0], envp, path, sizeof path);
	int ep[2];
	if (err == 0 && pipe2(ep, O_CLOEXEC) != 0)
		err = errno;
	// The pipe too goes above 2, which the child's stdio takes (the tail
	// closed 0 to 2, so a new descriptor lands there first).
	for (int i = 0; err == 0 && i < 2; i++) {
		if (ep[i] < 3) {
			int up = fcntl(ep[i], F_DUPFD_CLOEXEC, 3);
			if (up < 0) {
				err = errno;
				close(ep[0]);
				close(ep[1]);
				break;
			}
			close(ep[i]);
			ep[i] = up;
		}
	}
	pid_t pid = -1;
	if (err == 0 && (pid = fork()) < 0) {
		err = errno;
		close(ep[0]);
		close(ep[1]);
	}
	if (pid == 0) {
		int e = 0;
		moat_sigmask(0);
		if (setsid() < 0)
			e = errno;
		for (int i = 0; e == 0 && i < 3; i++)
			if (dup3(fds[i], i, 0) < 0)
				e = errno;
		// A terminal becomes the new session's controlling one, as the
		// tool's does (tail.c).
		if (e == 0 && h->terminal && ioctl(0, TIOCSCTTY, 0) < 0)
			e = errno;
		if (e == 0 && chdir(h->cwd) != 0)
			e = errno;
		// Another identity needs CAP_SETGID and CAP_SETUID, which the
		// tail does not hold (the launcher refuses such a request first).
		if (e == 0 && (h->gid != getgid() || h->uid != getuid()) &&
		    (syscall(SYS_setresgid, h->gid, h->gid, h->gid) != 0 || syscall(SYS_setresuid, h->uid, h->uid, h->uid) != 0))
			e = errno;
		if (e == 0) {
			execve(path, argv, envp);
			e = errno;
		}
		while (write(ep[1], &e, sizeof e) < 0 && errno == EINTR)
			;
		_exit(127);
	}
	for (int i = 0; i < 3; i++)
		close(fds[i]);
	if (err != 0) {
		moat_exec_msg('f', h->id, (uint32_t)err);
		return;
	}
	close(ep[1]);
	int e;
	ssize_t r;
	do
		r = read(ep[0], &e, sizeof e);
	while (r < 0 && errno == EINTR);
	close(ep[0]);
	if (r == (ssize_t)sizeof e) {
		while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
			;
		moat_exec_msg('f', h->id, (uint32_t)e);
		return;
	}
	moat_execs[moat_nexecs].id = h->id;
	moat_execs[moat_nexecs].pid = pid;
	moat_nexecs++;
	moat_exec_msg('e', h->id, (uint32_t)pid);
}

// moat_serve reads one message from the launcher once the tool runs. Its
// EOF, or anything that breaks the protocol, ends the sandbox (nothing
// after it could be framed); a whole exec frame with a bad body is
// refused alone.
static void moat_serve(void) {
	unsigned char t;
	int fds[4], nfds = 0;
	union {
		char buf[CMSG_SPACE(4 * sizeof(int))];
		struct cmsghdr align;
	} ctl;
	struct iovec iov = {&t, 1};
	struct msghdr mh;
	memset(&mh, 0, sizeof mh);
	mh.msg_iov = &iov;
	mh.msg_iovlen = 1;
	mh.msg_control = ctl.buf;
	mh.msg_controllen = sizeof ctl.buf;
	ssize_t r = recvmsg(moat_sync, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
	if (r < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK))
		return;
	if (r <= 0)
		moat_leave(MOAT_EXIT_GONE);
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c != NULL; c = CMSG_NXTHDR(&mh, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		int *in = (int *)CMSG_DATA(c);
		for (size_t i = 0; i < k; i++) {
			int fd;
			memcpy(&fd, in + i, sizeof fd);
			if (nfds < 4)
				fds[nfds++] = fd;
			else
				close(fd);
		}
	}
	if (t == 'x' && nfds == 3 && !(mh.msg_flags & MSG_CTRUNC)) {
		unsigned char hdr[4];
		if (moat_read_full(moat_sync, hdr, sizeof hdr) != 0)
			moat_leave(MOAT_EXIT_GONE);
		uint32_t n = moat_be32(hdr);
		if (n > MOAT_MAX_FRAME || n < 4)
			moat_leave(MOAT_EXIT_SETUP);
		char *body = malloc((size_t)n + 1);
		char **vec = calloc((size_t)n + 2, sizeof *vec);
		if (body == NULL || vec == NULL)
			moat_leave(MOAT_EXIT_SETUP);
		body[n] = 0;
		if (moat_read_full(moat_sync, body, n) != 0)
			moat_leave(MOAT_EXIT_GONE);
		struct moat_exec_hdr h;
		int err = moat_parse_exec(body, n, vec, (size_t)n + 2, &h) != NULL ? EINVAL : 0;
		for (int i = 0; err == 0 && i < 3; i++) {
			// A descriptor received as 0, 1 or 2 goes above them, where
			// the child's dup3 onto its stdio cannot clobber it.
			if (fds[i] < 3) {
				int up = fcntl(fds[i], F_DUPFD_CLOEXEC, 3);
				if (up < 0) {
					err = errno;
					break;
				}
				close(fds[i]);
				fds[i] = up;
			}
		}
		if (err != 0) {
			for (int i = 0; i < 3; i++)
				close(fds[i]);
			moat_exec_msg('f', moat_be32((unsigned char *)body), (uint32_t)err);
		} else {
			moat_exec_start(&h, vec, vec + h.argc + 1, fds);
		}
		free(vec);
		free(body);
		return;
	}
	if (t == 'k' && nfds == 0) {
		unsigned char b[8];
		if (moat_read_full(moat_sync, b, sizeof b) != 0)
			moat_leave(MOAT_EXIT_GONE);
		uint32_t id = moat_be32(b), sig = moat_be32(b + 4);
		int i = moat_exec_find(id);
		if (i >= 0 && sig >= 1 && sig <= 64)
			kill(moat_execs[i].pid, (int)sig);
		return;
	}
	moat_leave(MOAT_EXIT_SETUP);
}
