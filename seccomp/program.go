// Package seccomp turns an OCI seccomp profile into a classic BPF program in
// the host, once per policy, and loads such a program with a raw system call
// in the sandbox child just before it execs the tool. libseccomp runs only in
// the host (compile); the child needs nothing but x/sys/unix (load).
package seccomp

import (
	"encoding/binary"
	"fmt"

	"golang.org/x/sys/unix"
)

// Program is a kernel-ready classic BPF filter.
type Program []unix.SockFilter

// instructionSize is sizeof(struct sock_filter).
const instructionSize = 8

// MarshalBinary encodes p in the kernel's in-memory layout (native endian),
// which is what travels to the sandbox child.
func (p Program) MarshalBinary() ([]byte, error) {
	b := make([]byte, 0, len(p)*instructionSize)
	for _, f := range p {
		b = binary.NativeEndian.AppendUint16(b, f.Code)
		b = append(b, f.Jt, f.Jf)
		b = binary.NativeEndian.AppendUint32(b, f.K)
	}
	return b, nil
}

// ParseProgram decodes bytes written by MarshalBinary.
func ParseProgram(b []byte) (Program, error) {
	if len(b) == 0 || len(b)%instructionSize != 0 {
		return nil, fmt.Errorf("parse seccomp program: %d bytes is not a whole number of %d-byte instructions", len(b), instructionSize)
	}
	if n := len(b) / instructionSize; n > unix.BPF_MAXINSNS {
		return nil, fmt.Errorf("parse seccomp program: %d instructions exceed the kernel's limit of %d", n, unix.BPF_MAXINSNS)
	}
	p := make(Program, 0, len(b)/instructionSize)
	for i := 0; i < len(b); i += instructionSize {
		p = append(p, unix.SockFilter{
			Code: binary.NativeEndian.Uint16(b[i:]),
			Jt:   b[i+2],
			Jf:   b[i+3],
			K:    binary.NativeEndian.Uint32(b[i+4:]),
		})
	}
	return p, nil
}
