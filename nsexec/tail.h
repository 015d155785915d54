// The C tail's declarations (tail.c says what the tail is): what its files
// share (tail.c, tail_exec.h, tail_wire.c), what the Go side calls through
// cgo (tail_cgo_linux.go), and what the sanitizer harness drives
// (testdata/tailfuzz/harness.c, .ci/c-sanitize).
#ifndef MOAT_TAIL_H
#define MOAT_TAIL_H

#include <stddef.h>
#include <stdint.h>

// The Step numbers of errors.go (TestTailConstants checks them).
enum {
	MOAT_STEP_CONFIG = 2,
	MOAT_STEP_CAPABILITIES = 21,
	MOAT_STEP_FDS = 23,
	MOAT_STEP_SECCOMP = 24,
	MOAT_STEP_EXEC = 25,
};

static inline uint32_t moat_be32(const unsigned char *p) {
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

struct moat_exec_hdr {
	uint32_t id, uid, gid;
	int terminal; // stdin becomes the controlling terminal
	size_t argc, envc;
	char *cwd;
};

// The wire's parsers (tail_wire.c): each checks a body as strictly as its
// Go twin and points vec at its strings, or returns why it refuses it.
const char *moat_parse_request(char *body, size_t n, char **vec, size_t cap, size_t *argcp);
const char *moat_parse_exec(char *body, size_t n, char **vec, size_t cap, struct moat_exec_hdr *h);

// For the Go side (tail_cgo_linux.go): the limit the init started with,
// and the parsers and the PATH search alone, for the tests.
int moat_orig_nofile_get(unsigned long long *cur, unsigned long long *max);
int moat_test_parse(char *body, size_t n, size_t *argc, size_t *total, const char **why);
int moat_test_parse_exec(char *body, size_t n, struct moat_exec_hdr *h, size_t *total, char *cwd, size_t cwdsz, const char **why);
int moat_test_lookup(const char *name, char *block, size_t n, size_t count, char *out, size_t outsz);
const char *moat_default_path(void);

#endif
