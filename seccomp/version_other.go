//go:build !linux || !cgo

package seccomp

// LibraryVersion is empty in a build without libseccomp (no cgo): such a
// build cannot compile filters, and a policy that asks for one refuses.
func LibraryVersion() string { return "" }
