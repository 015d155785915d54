//go:build !linux || !cgo

package seccomp

// LibraryVersion is empty in a build without libseccomp (no cgo): such a
// build compiles no filter; it loads the built-in policies' programs it
// carries (PrecompiledLibrary) and refuses any other profile.
func LibraryVersion() string { return "" }
