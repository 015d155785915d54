//go:build !linux

package nsexec

// HostMode is ModeFull where nsexec has no sandbox at all (Start fails
// with ErrUnsupported).
func HostMode() (Mode, string) { return ModeFull, "" }

// HostnameRefused is false where nsexec has no sandbox at all.
func HostnameRefused() (bool, string) { return false, "" }

// UserNSRefused is false where nsexec has no sandbox at all.
func UserNSRefused() (bool, string) { return false, "" }

// ProcMode is ModeFull where nsexec has no sandbox at all.
func ProcMode() (Mode, string) { return ModeFull, "" }

// UserNSClear is true where nsexec has no sandbox at all.
func UserNSClear() bool { return true }

// UserNSVerdict is false where nsexec has no sandbox at all.
func UserNSVerdict(error) (bool, string) { return false, "" }
