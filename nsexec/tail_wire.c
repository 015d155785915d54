//go:build linux && cgo

// The tail's wire parsers, apart from the tail so that the sanitizer
// harness (testdata/tailfuzz/harness.c) builds them alone: pure functions
// of their input, no system call. Their Go twins are decodeRequest
// (wire_linux.go) and decodeExec (execwire_linux.go); TestTailRequestParser,
// TestExecParsers, FuzzWireRequest and FuzzWireExec compare them.

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tail.h"

// An exec body's six numbers: id, uid, gid, argc, envc, flags
// (execwire_linux.go); the one flag is the terminal's.
#define MOAT_EXEC_HEADER 24
#define MOAT_EXEC_TERMINAL 1u

// moat_parse_request checks a request body (wire_linux.go encodeRequest;
// decodeRequest is the Go twin) and points vec at its strings: vec[0] to
// vec[argc-1] the args, vec[argc] NULL, then the env and a NULL. vec has
// room for the count of strings plus 2. It returns NULL, or why the body
// is refused.
const char *moat_parse_request(char *body, size_t n, char **vec, size_t cap, size_t *argcp) {
	if (n < 8)
		return "is shorter than its two counts";
	uint64_t argc = moat_be32((unsigned char *)body), envc = moat_be32((unsigned char *)body + 4);
	if (argc == 0)
		return "names no tool";
	if (argc + envc > n - 8)
		return "counts more strings than it has bytes";
	if (argc + envc + 2 > cap)
		return "counts more strings than it has bytes";
	size_t off = 8;
	for (uint64_t i = 0; i < argc + envc; i++) {
		char *s = body + off;
		char *z = memchr(s, 0, n - off);
		if (z == NULL)
			return "ends inside a string";
		vec[i < argc ? i : i + 1] = s;
		off = (size_t)(z - body) + 1;
	}
	if (off != n)
		return "has bytes after its last string";
	if (vec[0][0] == 0)
		return "names no tool";
	vec[argc] = NULL;
	vec[argc + envc + 1] = NULL;
	*argcp = (size_t)argc;
	return NULL;
}

// moat_parse_exec checks an exec body and points vec at its strings:
// vec[0] to vec[argc-1] the args, vec[argc] NULL, then the env and a NULL.
// vec has room for the count of strings plus 2. It returns NULL, or why
// the body is refused.
const char *moat_parse_exec(char *body, size_t n, char **vec, size_t cap, struct moat_exec_hdr *h) {
	if (n < MOAT_EXEC_HEADER)
		return "is shorter than its six numbers";
	unsigned char *u = (unsigned char *)body;
	h->id = moat_be32(u);
	h->uid = moat_be32(u + 4);
	h->gid = moat_be32(u + 8);
	uint64_t argc = moat_be32(u + 12), envc = moat_be32(u + 16);
	uint32_t flags = moat_be32(u + 20);
	if (h->id == 0)
		return "has id 0, which is reserved";
	if (h->uid == 0xffffffffu || h->gid == 0xffffffffu)
		return "has the invalid id 4294967295";
	if (argc == 0)
		return "names no program";
	if (flags & ~MOAT_EXEC_TERMINAL)
		return "has a flag this build does not know";
	h->terminal = (flags & MOAT_EXEC_TERMINAL) != 0;
	if (1 + argc + envc > n - MOAT_EXEC_HEADER)
		return "counts more strings than it has bytes";
	if (argc + envc + 2 > cap)
		return "counts more strings than it has bytes";
	size_t off = MOAT_EXEC_HEADER;
	for (uint64_t i = 0; i < 1 + argc + envc; i++) {
		char *s = body + off;
		char *z = memchr(s, 0, n - off);
		if (z == NULL)
			return "ends inside a string";
		if (i == 0)
			h->cwd = s;
		else
			vec[i - 1 < argc ? i - 1 : i] = s;
		off = (size_t)(z - body) + 1;
	}
	if (off != n)
		return "has bytes after its last string";
	if (h->cwd[0] != '/')
		return "has a cwd that is not an absolute path";
	if (vec[0][0] == 0)
		return "names no program";
	vec[argc] = NULL;
	vec[argc + envc + 1] = NULL;
	h->argc = (size_t)argc;
	h->envc = (size_t)envc;
	return NULL;
}

// For tests: the parser alone, on a copy.
int moat_test_parse(char *body, size_t n, size_t *argc, size_t *total, const char **why) {
	size_t cap = n + 2;
	char **vec = calloc(cap, sizeof *vec);
	if (vec == NULL)
		return -1;
	*why = moat_parse_request(body, n, vec, cap, argc);
	*total = 0;
	if (*why == NULL) {
		for (char **v = vec; *v != NULL; v++)
			(*total)++;
		for (char **v = vec + *argc + 1; *v != NULL; v++)
			(*total)++;
	}
	free(vec);
	return 0;
}

// For tests: the exec parser alone, on a copy; the cwd is copied out.
int moat_test_parse_exec(char *body, size_t n, struct moat_exec_hdr *h, size_t *total, char *cwd, size_t cwdsz, const char **why) {
	size_t cap = n + 2;
	char **vec = calloc(cap, sizeof *vec);
	if (vec == NULL)
		return -1;
	*why = moat_parse_exec(body, n, vec, cap, h);
	*total = 0;
	cwd[0] = 0;
	if (*why == NULL) {
		*total = h->argc + h->envc;
		snprintf(cwd, cwdsz, "%s", h->cwd);
	}
	h->cwd = NULL; // it pointed into body, which the caller frees
	free(vec);
	return 0;
}
