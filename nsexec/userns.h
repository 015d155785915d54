// The user namespace join (userns.c), as userjoin_cgo_linux.go calls it.
#ifndef MOAT_USERNS_H
#define MOAT_USERNS_H

// moat_userns_result says what the constructor did: 0 when it was not
// asked to join (no _MOAT_USERNS), 1 when it joined, -1 when it failed;
// then *err is the errno and *what the step (static strings).
int moat_userns_result(int *err, const char **what);
// moat_userns_parse parses a _MOAT_USERNS value (userns.c): 0 with fd,
// flags, proc and caps in out, or -1.
int moat_userns_parse(const char *v, unsigned long long out[4]);

#endif
