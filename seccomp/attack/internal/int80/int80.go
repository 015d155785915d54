// Package int80 makes i386-ABI system calls from a 64-bit process, so tests
// can check that a seccomp filter refuses the compat entry point (int $0x80
// on x86_64 reports AUDIT_ARCH_I386 to seccomp). Test support only.
package int80
