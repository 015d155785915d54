// The sanitizer harness of the C tail's wire parsers: .ci/c-sanitize builds
// it with nsexec/tail_wire.c under AddressSanitizer and
// UndefinedBehaviorSanitizer and runs it over the fuzz corpus of the two
// targets that compare those parsers with the Go decoders (FuzzWireRequest,
// FuzzWireExec in nsexec). The Go tests reach the parsers through cgo, where
// no sanitizer sees them; here each input is copied into a buffer of exactly
// its length (the tail gives its parsers one more byte, a NUL), so a read
// one byte past the body is a report, not a lucky terminator.
//
// Usage: harness DIR...  Each DIR is named for its target and holds files
// in the Go fuzz corpus format ("go test fuzz v1", then one []byte("...")
// value). A file it cannot read, a directory of another target, or no input
// at all is an error (exit 2); a parser that disagrees with its test
// wrapper, or a string that is not inside its body, exit 1; a sanitizer
// report aborts the run (-fno-sanitize-recover=all).
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tail.h"

static void die(int code, const char *fmt, ...) {
	va_list ap;
	va_start(ap, fmt);
	fputs("tailfuzz: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	exit(code);
}

static int hexval(int c) {
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

// put_utf8 appends rune r as UTF-8, as Go's \u and \U escapes mean it.
static int put_utf8(unsigned char *out, size_t *n, unsigned long r) {
	if (r > 0x10ffff || (r >= 0xd800 && r <= 0xdfff))
		return -1;
	if (r < 0x80) {
		out[(*n)++] = (unsigned char)r;
	} else if (r < 0x800) {
		out[(*n)++] = (unsigned char)(0xc0 | r >> 6);
		out[(*n)++] = (unsigned char)(0x80 | (r & 0x3f));
	} else if (r < 0x10000) {
		out[(*n)++] = (unsigned char)(0xe0 | r >> 12);
		out[(*n)++] = (unsigned char)(0x80 | (r >> 6 & 0x3f));
		out[(*n)++] = (unsigned char)(0x80 | (r & 0x3f));
	} else {
		out[(*n)++] = (unsigned char)(0xf0 | r >> 18);
		out[(*n)++] = (unsigned char)(0x80 | (r >> 12 & 0x3f));
		out[(*n)++] = (unsigned char)(0x80 | (r >> 6 & 0x3f));
		out[(*n)++] = (unsigned char)(0x80 | (r & 0x3f));
	}
	return 0;
}

// unquote decodes the Go string literal at *p (interpreted or raw) into out,
// which has room for strlen(*p) bytes (no escape decodes longer than itself).
// It returns 0 with *p past the closing quote, or -1.
static int unquote(const char **p, unsigned char *out, size_t *n) {
	const char *s = *p;
	*n = 0;
	if (*s == '`') {
		for (s++; *s != '`'; s++) {
			if (*s == 0)
				return -1;
			if (*s != '\r') // Go drops carriage returns from raw strings
				out[(*n)++] = (unsigned char)*s;
		}
		*p = s + 1;
		return 0;
	}
	if (*s != '"')
		return -1;
	for (s++; *s != '"'; s++) {
		if (*s == 0 || *s == '\n')
			return -1;
		if (*s != '\\') {
			out[(*n)++] = (unsigned char)*s;
			continue;
		}
		s++;
		const char *simple = strchr("abfnrtv\\\"", *s);
		if (*s != 0 && simple != NULL) {
			out[(*n)++] = (unsigned char)"\a\b\f\n\r\t\v\\\""[simple - "abfnrtv\\\""];
		} else if (*s == 'x' || *s == 'u' || *s == 'U') {
			int digits = *s == 'x' ? 2 : *s == 'u' ? 4 : 8;
			unsigned long v = 0;
			for (int i = 0; i < digits; i++) {
				int h = hexval(s[1 + i]);
				if (h < 0)
					return -1;
				v = v << 4 | (unsigned long)h;
			}
			if (*s == 'x')
				out[(*n)++] = (unsigned char)v;
			else if (put_utf8(out, n, v) != 0)
				return -1;
			s += digits;
		} else if (*s >= '0' && *s <= '7') {
			unsigned v = 0;
			for (int i = 0; i < 3; i++) {
				if (s[i] < '0' || s[i] > '7')
					return -1;
				v = v << 3 | (unsigned)(s[i] - '0');
			}
			if (v > 255)
				return -1;
			out[(*n)++] = (unsigned char)v;
			s += 2;
		} else {
			return -1;
		}
	}
	*p = s + 1;
	return 0;
}

// read_input reads one corpus file: its one []byte value, malloc'd.
static unsigned char *read_input(const char *path, size_t *n) {
	FILE *f = fopen(path, "r");
	if (f == NULL)
		die(2, "%s: %s", path, strerror(errno));
	static char text[1 << 22];
	size_t len = fread(text, 1, sizeof text - 1, f);
	if (ferror(f) || !feof(f))
		die(2, "%s: unreadable, or larger than %zu bytes", path, sizeof text - 1);
	fclose(f);
	text[len] = 0;
	static const char magic[] = "go test fuzz v1\n";
	if (strncmp(text, magic, sizeof magic - 1) != 0)
		die(2, "%s: not a Go fuzz corpus file (no \"go test fuzz v1\" line)", path);
	const char *p = text + sizeof magic - 1;
	p += strspn(p, " \t\r\n");
	if (strncmp(p, "[]byte(", 7) != 0)
		die(2, "%s: its value is not a []byte(...)", path);
	p += 7;
	unsigned char *out = malloc(len + 1);
	if (out == NULL)
		die(2, "out of memory");
	if (unquote(&p, out, n) != 0 || *p++ != ')')
		die(2, "%s: its []byte value is not a Go string literal this harness reads", path);
	p += strspn(p, " \t\r\n");
	if (*p != 0)
		die(2, "%s: more than one value (these targets take one []byte)", path);
	return out;
}

// exact copies in into a buffer of exactly n bytes, where the sanitizer
// reports a read past the end.
static char *exact(const unsigned char *in, size_t n) {
	char *b = malloc(n); // for n 0, a zero-byte block: any read of it is reported
	if (b == NULL && n > 0)
		die(2, "out of memory");
	if (n > 0)
		memcpy(b, in, n);
	return b;
}

// inside checks that each string of the NULL-ended list v starts in body and
// ends, with its NUL, inside it; it returns the count.
static size_t inside(const char *path, char **v, const char *body, size_t n) {
	size_t k = 0;
	for (; *v != NULL; v++, k++) {
		if (*v < body || *v >= body + n || *v + strlen(*v) >= body + n)
			die(1, "%s: a parsed string is not inside its body", path);
	}
	return k;
}

static int accepted;

static void run_request(const char *path, const unsigned char *in, size_t n) {
	char *body = exact(in, n);
	size_t cap = n + 2, argc = 0;
	char **vec = calloc(cap, sizeof *vec);
	if (vec == NULL)
		die(2, "out of memory");
	const char *why = moat_parse_request(body, n, vec, cap, &argc);
	size_t total = 0;
	if (why == NULL) {
		total = inside(path, vec, body, n);
		if (total != argc)
			die(1, "%s: %zu args parsed, %zu in the vector", path, argc, total);
		total += inside(path, vec + argc + 1, body, n);
		accepted++;
	}
	free(vec);
	size_t a, t;
	const char *w;
	if (moat_test_parse(body, n, &a, &t, &w) != 0)
		die(2, "out of memory");
	if ((w == NULL) != (why == NULL) || (w == NULL && (a != argc || t != total)))
		die(1, "%s: moat_test_parse and moat_parse_request disagree", path);
	free(body);
}

static void run_exec(const char *path, const unsigned char *in, size_t n) {
	char *body = exact(in, n);
	size_t cap = n + 2;
	char **vec = calloc(cap, sizeof *vec);
	if (vec == NULL)
		die(2, "out of memory");
	struct moat_exec_hdr h;
	memset(&h, 0, sizeof h);
	const char *why = moat_parse_exec(body, n, vec, cap, &h);
	size_t total = 0;
	if (why == NULL) {
		char *cwd[2] = {h.cwd, NULL};
		inside(path, cwd, body, n);
		if (inside(path, vec, body, n) != h.argc || inside(path, vec + h.argc + 1, body, n) != h.envc)
			die(1, "%s: the counts parsed are not the vectors'", path);
		total = h.argc + h.envc;
		accepted++;
	}
	free(vec);
	struct moat_exec_hdr th;
	size_t t;
	char cwd[4096];
	const char *w;
	if (moat_test_parse_exec(body, n, &th, &t, cwd, sizeof cwd, &w) != 0)
		die(2, "out of memory");
	if ((w == NULL) != (why == NULL) || (w == NULL && (t != total || th.id != h.id || th.argc != h.argc)))
		die(1, "%s: moat_test_parse_exec and moat_parse_exec disagree", path);
	free(body);
}

int main(int argc, char **argv) {
	int inputs = 0;
	if (argc < 2)
		die(2, "usage: harness DIR... (each named FuzzWireRequest or FuzzWireExec)");
	for (int i = 1; i < argc; i++) {
		const char *base = strrchr(argv[i], '/');
		base = base != NULL ? base + 1 : argv[i];
		void (*run)(const char *, const unsigned char *, size_t);
		if (strcmp(base, "FuzzWireRequest") == 0)
			run = run_request;
		else if (strcmp(base, "FuzzWireExec") == 0)
			run = run_exec;
		else
			die(2, "%s: not a corpus of FuzzWireRequest or FuzzWireExec", argv[i]);
		DIR *d = opendir(argv[i]);
		if (d == NULL)
			die(2, "%s: %s", argv[i], strerror(errno));
		struct dirent *de;
		while ((de = readdir(d)) != NULL) {
			if (de->d_name[0] == '.')
				continue;
			char path[4096];
			snprintf(path, sizeof path, "%s/%s", argv[i], de->d_name);
			size_t n;
			unsigned char *in = read_input(path, &n);
			run(path, in, n);
			free(in);
			inputs++;
		}
		closedir(d);
	}
	if (inputs == 0)
		die(2, "no input in %d directories", argc - 1);
	printf("tailfuzz: %d inputs, %d accepted by the parsers, no sanitizer report\n", inputs, accepted);
	return 0;
}
