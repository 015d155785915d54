package cgroups

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// cgroup v2 has no devices files: the allow-list is an eBPF program of
// type BPF_PROG_TYPE_CGROUP_DEVICE attached to the group with
// BPF_CGROUP_DEVICE (Documentation/admin-guide/cgroup-v2.rst, "Device
// controller"), which the kernel runs on every open(2) and mknod(2) of a
// device node by a process of the group or below; a return of 0 makes
// the call fail with EPERM, whoever the caller is (host root too). The
// program is hand-assembled here, as runc's libcontainer/cgroups/devices
// devicefilter and crun's ebpf.c do it, with the same meaning as the v1
// files' rules written in order (setDevices): the last rule that matches
// decides, and a device no rule matches is denied.

// The program's context, include/uapi/linux/bpf.h struct
// bpf_cgroup_dev_ctx: u32 access_type at 0 (the device's type in the low
// 16 bits, BPF_DEVCG_DEV_BLOCK or _CHAR, the access asked in the high
// 16, BPF_DEVCG_ACC_MKNOD|_READ|_WRITE), u32 major at 4, u32 minor at 8.
const (
	devCtxAccessType = 0
	devCtxMajor      = 4
	devCtxMinor      = 8

	devBlock = 1 // BPF_DEVCG_DEV_BLOCK
	devChar  = 2 // BPF_DEVCG_DEV_CHAR

	accMknod = 1 // BPF_DEVCG_ACC_MKNOD
	accRead  = 2 // BPF_DEVCG_ACC_READ
	accWrite = 4 // BPF_DEVCG_ACC_WRITE
	accAll   = accMknod | accRead | accWrite
)

// The registers the program keeps the context's fields in once read
// (R1 holds the context's pointer on entry, R0 the return value: kernel
// Documentation/bpf/standardization/instruction-set.rst, "Registers and
// calling convention"); R1 is free for scratch after the prologue.
const (
	rRet     = 0
	rScratch = 1
	rType    = 2
	rAccess  = 3
	rMajor   = 4
	rMinor   = 5
	rCtx     = 1
)

// insn is one eBPF instruction as the kernel reads it (struct bpf_insn:
// an 8-bit opcode, the destination register in the low nibble of the
// next byte and the source in the high one, a signed 16-bit offset and a
// signed 32-bit immediate, little-endian on the hosts moat runs on).
type insn struct {
	code     uint8
	dst, src uint8
	off      int16
	imm      int32
}

func ldxW(dst, src uint8, off int16) insn {
	return insn{code: unix.BPF_LDX | unix.BPF_MEM | unix.BPF_W, dst: dst, src: src, off: off}
}
func alu32K(op uint8, dst uint8, imm int32) insn {
	return insn{code: unix.BPF_ALU | op | unix.BPF_K, dst: dst, imm: imm}
}
func mov32X(dst, src uint8) insn {
	return insn{code: unix.BPF_ALU | unix.BPF_MOV | unix.BPF_X, dst: dst, src: src}
}

// jneK skips off instructions when dst != imm (a 32-bit compare: the
// fields are u32).
func jneK(dst uint8, imm int32, off int16) insn {
	return insn{code: unix.BPF_JMP32 | unix.BPF_JNE | unix.BPF_K, dst: dst, imm: imm, off: off}
}
func jneX(dst, src uint8, off int16) insn {
	return insn{code: unix.BPF_JMP32 | unix.BPF_JNE | unix.BPF_X, dst: dst, src: src, off: off}
}
func exitWith(ret int32) []insn {
	return []insn{alu32K(unix.BPF_MOV, rRet, ret), {code: unix.BPF_JMP | unix.BPF_EXIT}}
}

// deviceProgram compiles rules into the program's instructions: a
// prologue that reads the context's fields into registers, then one
// block per rule from the last to the first, each returning its verdict
// when the device matches it and falling through to the next otherwise,
// then a deny. A rule of type "a" (or none) matches every device and
// access, as it resets a v1 group (setDevices), and ends the program;
// a nil or -1 major or minor matches any; an access of "" means "rwm".
func deviceProgram(rules []specs.LinuxDeviceCgroup) ([]insn, error) {
	prog := []insn{
		ldxW(rType, rCtx, devCtxAccessType),
		alu32K(unix.BPF_AND, rType, 0xffff),
		ldxW(rAccess, rCtx, devCtxAccessType),
		alu32K(unix.BPF_RSH, rAccess, 16),
		ldxW(rMajor, rCtx, devCtxMajor),
		ldxW(rMinor, rCtx, devCtxMinor),
	}
	for i := len(rules) - 1; i >= 0; i-- {
		b, err := ruleBlock(rules[i])
		if err != nil {
			return nil, fmt.Errorf("linux.resources.devices[%d]: %w", i, err)
		}
		prog = append(prog, b...)
		if len(b) == len(exitWith(0)) {
			// A rule with no check decides every device: what would
			// follow is unreachable, which the verifier refuses.
			return prog, nil
		}
	}
	return append(prog, exitWith(0)...), nil
}

// ruleBlock is one rule's block: its checks, each jumping past the
// block's end on a mismatch, then its verdict.
func ruleBlock(r specs.LinuxDeviceCgroup) ([]insn, error) {
	verdict := int32(0)
	if r.Allow {
		verdict = 1
	}
	// A check is a compare with a placeholder offset, fixed below once
	// the block's length is known (an offset counts from the next
	// instruction).
	var checks [][]insn
	switch r.Type {
	case "", "a":
	case "c":
		checks = append(checks, []insn{jneK(rType, devChar, 0)})
	case "b":
		checks = append(checks, []insn{jneK(rType, devBlock, 0)})
	default:
		return nil, fmt.Errorf("device type %q is none of a, b, c", r.Type)
	}
	if r.Type == "c" || r.Type == "b" {
		acc := int32(0)
		for _, c := range r.Access {
			switch c {
			case 'r':
				acc |= accRead
			case 'w':
				acc |= accWrite
			case 'm':
				acc |= accMknod
			default:
				return nil, fmt.Errorf("device access %q is not of r, w, m", r.Access)
			}
		}
		if acc != 0 && acc != accAll {
			// The rule matches when every access asked is one it names:
			// (access & acc) == access.
			checks = append(checks, []insn{mov32X(rScratch, rAccess), alu32K(unix.BPF_AND, rScratch, acc), jneX(rScratch, rAccess, 0)})
		}
		if r.Major != nil && *r.Major >= 0 {
			checks = append(checks, []insn{jneK(rMajor, int32(*r.Major), 0)})
		}
		if r.Minor != nil && *r.Minor >= 0 {
			checks = append(checks, []insn{jneK(rMinor, int32(*r.Minor), 0)})
		}
	}
	var b []insn
	for _, c := range checks {
		b = append(b, c...)
	}
	b = append(b, exitWith(verdict)...)
	for i := range b {
		if b[i].code&0x07 == unix.BPF_JMP32 {
			b[i].off = int16(len(b) - i - 1)
		}
	}
	return b, nil
}

// encode lays the instructions out as struct bpf_insn.
func encode(prog []insn) []byte {
	out := make([]byte, 0, 8*len(prog))
	for _, in := range prog {
		out = append(out, in.code, in.dst&0x0f|in.src<<4)
		out = binary.LittleEndian.AppendUint16(out, uint16(in.off))
		out = binary.LittleEndian.AppendUint32(out, uint32(in.imm))
	}
	return out
}

// progLoadAttr is the head of union bpf_attr for BPF_PROG_LOAD
// (include/uapi/linux/bpf.h); the kernel takes a shorter attr than its
// own and reads the rest as zero.
type progLoadAttr struct {
	progType    uint32
	insnCnt     uint32
	insns       uint64
	license     uint64
	logLevel    uint32
	logSize     uint32
	logBuf      uint64
	kernVersion uint32
	progFlags   uint32
	progName    [unix.BPF_OBJ_NAME_LEN]byte
}

// progAttachAttr is union bpf_attr for BPF_PROG_ATTACH.
type progAttachAttr struct {
	targetFd     uint32
	attachBpfFd  uint32
	attachType   uint32
	attachFlags  uint32
	replaceBpfFd uint32
}

// DeviceProgramError is a device program this process could not load or
// attach: Err is the bpf(2) errno (EPERM without CAP_BPF or CAP_SYS_ADMIN,
// as for an unprivileged user: kernel.unprivileged_bpf_disabled, and no
// unprivileged process may load a cgroup program anyway).
type DeviceProgramError struct {
	Op  string // "load" or "attach"
	Err error
	Log string // the verifier's log of a refused program
}

func (e *DeviceProgramError) Error() string {
	s := "cgroup v2 device program: " + e.Op + ": " + e.Err.Error()
	if e.Log != "" {
		s += "; verifier: " + e.Log
	}
	return s
}

func (e *DeviceProgramError) Unwrap() error { return e.Err }

// loadDeviceProgram loads prog and returns its descriptor. A refusal
// other than EPERM is loaded again with the verifier's log, which the
// error carries.
func loadDeviceProgram(prog []insn) (int, error) {
	code := encode(prog)
	license := []byte("Apache-2.0\x00")
	load := func(logBuf []byte) (int, error) {
		attr := progLoadAttr{
			progType: unix.BPF_PROG_TYPE_CGROUP_DEVICE,
			insnCnt:  uint32(len(prog)),
			insns:    uint64(uintptr(unsafe.Pointer(&code[0]))),
			license:  uint64(uintptr(unsafe.Pointer(&license[0]))),
		}
		copy(attr.progName[:], "moat_devices")
		if logBuf != nil {
			attr.logLevel, attr.logSize = 1, uint32(len(logBuf))
			attr.logBuf = uint64(uintptr(unsafe.Pointer(&logBuf[0])))
		}
		fd, _, errno := unix.Syscall(unix.SYS_BPF, unix.BPF_PROG_LOAD, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr))
		runtime.KeepAlive(code)
		runtime.KeepAlive(license)
		runtime.KeepAlive(logBuf)
		if errno != 0 {
			return -1, errno
		}
		unix.CloseOnExec(int(fd))
		return int(fd), nil
	}
	fd, err := load(nil)
	if err == nil {
		return fd, nil
	}
	if errors.Is(err, unix.EPERM) {
		return -1, &DeviceProgramError{Op: "load", Err: err}
	}
	logBuf := make([]byte, 1<<16)
	if _, err2 := load(logBuf); err2 == nil {
		return -1, &DeviceProgramError{Op: "load", Err: err}
	}
	n := 0
	for n < len(logBuf) && logBuf[n] != 0 {
		n++
	}
	return -1, &DeviceProgramError{Op: "load", Err: err, Log: string(logBuf[:n])}
}

// attachDeviceProgram attaches the program progFd to the group dirFd (a
// descriptor of the group's directory opened for reading: bpf(2) takes no
// O_PATH one) with BPF_F_ALLOW_MULTI, as runc does: a program an
// ancestor has attached the same way still runs, and a device is allowed
// only when every one allows it (kernel/bpf/cgroup.c, the effective
// array's AND of verdicts), so moat's program narrows an engine's and
// never widens it.
func attachDeviceProgram(dirFd, progFd int) error {
	attr := progAttachAttr{
		targetFd:    uint32(dirFd),
		attachBpfFd: uint32(progFd),
		attachType:  unix.BPF_CGROUP_DEVICE,
		attachFlags: unix.BPF_F_ALLOW_MULTI,
	}
	if _, _, errno := unix.Syscall(unix.SYS_BPF, unix.BPF_PROG_ATTACH, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr)); errno != 0 {
		return &DeviceProgramError{Op: "attach", Err: errno}
	}
	return nil
}

// setDeviceProgram compiles rules, loads the program and attaches it to
// the group whose O_PATH descriptor is pathFd. The program stays attached
// after its descriptor is closed, until the group is removed.
func setDeviceProgram(pathFd int, rules []specs.LinuxDeviceCgroup) error {
	prog, err := deviceProgram(rules)
	if err != nil {
		return err
	}
	progFd, err := loadDeviceProgram(prog)
	if err != nil {
		return err
	}
	defer unix.Close(progFd)
	// Reopened from the O_PATH descriptor through "." (no path walk from
	// a name, so no symlink or mount can come between).
	dirFd, err := unix.Openat(pathFd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("cgroup v2 device program: open group: %w", err)
	}
	defer unix.Close(dirFd)
	return attachDeviceProgram(dirFd, progFd)
}
