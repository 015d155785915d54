package seccomp

import (
	"encoding/binary"
	"fmt"

	"golang.org/x/sys/unix"
)

// seccompData is the input a filter judges (struct seccomp_data,
// include/uapi/linux/seccomp.h).
type seccompData struct {
	nr   int32
	arch uint32
	args [6]uint64
}

// bytes lays d out as the kernel does (little endian: every architecture
// in archs is).
func (d seccompData) bytes() []byte {
	b := make([]byte, 64)
	binary.LittleEndian.PutUint32(b[0:], uint32(d.nr))
	binary.LittleEndian.PutUint32(b[4:], d.arch)
	for i, a := range d.args {
		binary.LittleEndian.PutUint64(b[16+8*i:], a)
	}
	return b
}

// run interprets p on d as the kernel's classic BPF would, for the
// instructions a seccomp program uses (net/core/filter.c, the checker
// seccomp_check_filter allows), and returns the SECCOMP_RET_* value. An
// instruction outside that set, a jump out of the program or a read
// beyond seccomp_data is an error, never a guess.
func run(p Program, d seccompData) (uint32, error) {
	data := d.bytes()
	var a, x uint32
	var mem [16]uint32
	for pc := 0; pc < len(p); pc++ {
		in := p[pc]
		switch in.Code {
		case unix.BPF_LD | unix.BPF_W | unix.BPF_ABS:
			if in.K%4 != 0 || int(in.K)+4 > len(data) {
				return 0, fmt.Errorf("pc %d: load at %d", pc, in.K)
			}
			a = binary.LittleEndian.Uint32(data[in.K:])
		case unix.BPF_LD | unix.BPF_W | unix.BPF_LEN:
			a = uint32(len(data))
		case unix.BPF_LD | unix.BPF_IMM:
			a = in.K
		case unix.BPF_LDX | unix.BPF_IMM:
			x = in.K
		case unix.BPF_LD | unix.BPF_MEM, unix.BPF_LDX | unix.BPF_MEM, unix.BPF_ST, unix.BPF_STX:
			if in.K >= uint32(len(mem)) {
				return 0, fmt.Errorf("pc %d: scratch slot %d", pc, in.K)
			}
			switch in.Code {
			case unix.BPF_LD | unix.BPF_MEM:
				a = mem[in.K]
			case unix.BPF_LDX | unix.BPF_MEM:
				x = mem[in.K]
			case unix.BPF_ST:
				mem[in.K] = a
			default:
				mem[in.K] = x
			}
		case unix.BPF_ALU | unix.BPF_AND | unix.BPF_K:
			a &= in.K
		case unix.BPF_ALU | unix.BPF_OR | unix.BPF_K:
			a |= in.K
		case unix.BPF_ALU | unix.BPF_AND | unix.BPF_X:
			a &= x
		case unix.BPF_MISC | unix.BPF_TAX:
			x = a
		case unix.BPF_MISC | unix.BPF_TXA:
			a = x
		case unix.BPF_RET | unix.BPF_K:
			return in.K, nil
		case unix.BPF_RET | unix.BPF_A:
			return a, nil
		case unix.BPF_JMP | unix.BPF_JA:
			pc += int(in.K)
		case unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, unix.BPF_JMP | unix.BPF_JGT | unix.BPF_K,
			unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K, unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K,
			unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_X, unix.BPF_JMP | unix.BPF_JGT | unix.BPF_X,
			unix.BPF_JMP | unix.BPF_JGE | unix.BPF_X, unix.BPF_JMP | unix.BPF_JSET | unix.BPF_X:
			k := in.K
			if in.Code&unix.BPF_X != 0 {
				k = x
			}
			var taken bool
			switch in.Code & 0xf0 {
			case unix.BPF_JEQ:
				taken = a == k
			case unix.BPF_JGT:
				taken = a > k
			case unix.BPF_JGE:
				taken = a >= k
			default:
				taken = a&k != 0
			}
			if taken {
				pc += int(in.Jt)
			} else {
				pc += int(in.Jf)
			}
		default:
			return 0, fmt.Errorf("pc %d: instruction %#04x is not interpreted here", pc, in.Code)
		}
		if pc+1 > len(p) {
			return 0, fmt.Errorf("pc %d: jump past the end", pc)
		}
	}
	return 0, fmt.Errorf("fell off the end of a %d-instruction program", len(p))
}
