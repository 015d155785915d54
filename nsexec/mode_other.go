//go:build !linux

package nsexec

// HostMode is ModeFull where nsexec has no sandbox at all (Start fails
// with ErrUnsupported).
func HostMode() (Mode, string) { return ModeFull, "" }
