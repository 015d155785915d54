//go:build !linux

package nsexec

// HostMode is ModeFull where nsexec has no sandbox at all (Start fails
// with ErrUnsupported).
func HostMode() (Mode, string) { return ModeFull, "" }

// HostnameRefused is false where nsexec has no sandbox at all.
func HostnameRefused() (bool, string) { return false, "" }

// UserNSRefused is false where nsexec has no sandbox at all.
func UserNSRefused() (bool, string) { return false, "" }
