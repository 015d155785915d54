//go:build linux && cgo

package nsexec

// The join itself is userns.c's constructor; userns.h declares what this
// file calls (tail_cgo_linux.go sets the package's C flags).

/*
#include <stdlib.h>
#include "userns.h"
*/
import "C"

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// haveUserJoin: this build links userns.c, so its init can join a user
// namespace before the Go runtime starts.
const haveUserJoin = true

// userJoined says how the constructor's join went: asked whether it was
// asked at all, and the *SetupError of a failed one.
func userJoined() (asked bool, err error) {
	var errno C.int
	var what *C.char
	switch C.moat_userns_result(&errno, &what) {
	case 0:
		return false, nil
	case 1:
		return true, nil
	}
	return true, &SetupError{Step: StepJoin, Detail: "join the pod's user namespace: " + C.GoString(what), Errno: unix.Errno(errno)}
}

// userNSParse runs the constructor's parser of a userNSEnv value (for the
// tests): its four numbers, or ok false.
func userNSParse(v string) (out [4]uint64, ok bool) {
	cs := C.CString(v)
	defer C.free(unsafe.Pointer(cs))
	var a [4]C.ulonglong
	if C.moat_userns_parse(cs, &a[0]) != 0 {
		return out, false
	}
	for i := range a {
		out[i] = uint64(a[i])
	}
	return out, true
}
