//go:build !amd64 && !arm64

package seccomp

// precompiledNative is nil: no program is compiled ahead for this
// architecture (precompiled.go), so a build without cgo refuses every
// profile here.
var precompiledNative *precompiledSet
