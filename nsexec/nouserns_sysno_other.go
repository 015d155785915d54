//go:build linux && !amd64

package nsexec

// noUserNSArchCalls: arm64 has only the *at forms of chmod and chown.
var noUserNSArchCalls []uintptr
