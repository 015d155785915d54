//go:build linux && cgo

package nsexec

// The C tail is tail.c (with tail_exec.h), its wire parsers tail_wire.c;
// tail.h declares what this file calls. The flags apply to every C file of
// the package: warnings are errors, so CI's build of the tree is the C's
// lint too.

/*
#cgo CFLAGS: -O2 -Wall -Wextra -Werror
#include <stdlib.h>
#include "tail.h"
*/
import "C"

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// haveTail: this build links the C tail, so the init hands over to it.
const haveTail = true

// tailParseExec runs the tail's exec parser on body (for the tests): the
// request's numbers, cwd and counts of args and of all strings, or why it
// refuses the body.
func tailParseExec(body []byte) (r execRequest, argc, total int, why string) {
	b := C.CBytes(append(append([]byte(nil), body...), 0))
	defer C.free(b)
	cwd := (*C.char)(C.calloc(4096, 1))
	defer C.free(unsafe.Pointer(cwd))
	var h C.struct_moat_exec_hdr
	var t C.size_t
	var w *C.char
	if C.moat_test_parse_exec((*C.char)(b), C.size_t(len(body)), &h, &t, cwd, 4096, &w) != 0 {
		return r, 0, 0, "out of memory"
	}
	if w != nil {
		return r, 0, 0, C.GoString(w)
	}
	r = execRequest{ID: uint32(h.id), UID: uint32(h.uid), GID: uint32(h.gid), Cwd: C.GoString(cwd), Terminal: h.terminal != 0}
	return r, int(h.argc), int(t), ""
}

// tailParse runs the tail's request parser on body (for the tests): the
// count of args and of all strings, or why it refuses the body.
func tailParse(body []byte) (argc, total int, why string) {
	b := C.CBytes(append(append([]byte(nil), body...), 0))
	defer C.free(b)
	var a, t C.size_t
	var w *C.char
	if C.moat_test_parse((*C.char)(b), C.size_t(len(body)), &a, &t, &w) != 0 {
		return 0, 0, "out of memory"
	}
	if w != nil {
		return 0, 0, C.GoString(w)
	}
	return int(a), int(t), ""
}

// tailLookup runs the tail's PATH search (for the tests): the path it
// would exec, or the errno it would report.
func tailLookup(name string, env []string) (string, error) {
	var block []byte
	for _, kv := range env {
		block = append(append(block, kv...), 0)
	}
	cb := C.CBytes(append(block, 0))
	defer C.free(cb)
	cn := C.CString(name)
	defer C.free(unsafe.Pointer(cn))
	out := (*C.char)(C.calloc(4096, 1))
	defer C.free(unsafe.Pointer(out))
	if e := C.moat_test_lookup(cn, (*C.char)(cb), C.size_t(len(block)), C.size_t(len(env)), out, 4096); e != 0 {
		return "", unix.Errno(e)
	}
	return C.GoString(out), nil
}

// tailDefaultPath is the PATH the tail searches when the env has none.
func tailDefaultPath() string { return C.GoString(C.moat_default_path()) }

// tailOrigNofile is the descriptor limit the init started with, if the Go
// runtime raised its soft limit since.
func tailOrigNofile() (unix.Rlimit, bool) {
	var cur, max C.ulonglong
	ok := C.moat_orig_nofile_get(&cur, &max) != 0
	return unix.Rlimit{Cur: uint64(cur), Max: uint64(max)}, ok
}

// tailSteps are the tail's step numbers, for TestTailConstants.
func tailSteps() map[Step]int {
	return map[Step]int{StepConfig: int(C.MOAT_STEP_CONFIG), StepCapabilities: int(C.MOAT_STEP_CAPABILITIES), StepFDs: int(C.MOAT_STEP_FDS),
		StepSeccomp: int(C.MOAT_STEP_SECCOMP), StepExec: int(C.MOAT_STEP_EXEC)}
}
