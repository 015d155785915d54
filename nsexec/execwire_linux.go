package nsexec

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"

	"golang.org/x/sys/unix"
)

// The exec protocol (issue 29, D2). Once the tool runs, the process that
// holds a sandbox's sync socket (an Adopted: moat-runtime's monitor) may ask
// the init for more processes. The init forks each one as it forked the
// tool, from the same thread (the Go init's exec thread, the C tail's only
// one), so it has the sandbox's namespaces, cgroup, filter and credentials
// and no capability the tool lacks, with no setns from the host (the path
// CVE-2016-9962, CVE-2019-5736 and CVE-2024-21626 took into runc's
// containers). After msgStarted, on the sync socket:
//
//	launcher -> init: msgExecReq, a 4-byte big-endian length and the body
//	                  (encodeExec), the process's three stdio descriptors as
//	                  SCM_RIGHTS on the msgExecReq byte
//	launcher -> init: msgExecSignal, the exec's id and a signal number
//	init -> launcher: msgExecStarted, the id and the process's pid in the
//	                  sandbox's pid namespace
//	init -> launcher: msgExecFailed, the id and an errno (nothing was started)
//	init -> launcher: msgExecExit, the id and the process's wait status
//	init -> launcher: msgExit and the tool's status, as before; the init then
//	                  exits, and the kernel kills every exec'd process with
//	                  the pid namespace, unreported
//
// Every number is 4 bytes, big-endian. Each side treats the other's bytes
// as untrusted: every count and length is bounded before anything is
// allocated for it, and a message of an unknown type, a length past
// maxFrame or descriptors where none belong ends the conversation (the init
// ends the sandbox; the launcher closes its end, which does the same), since
// nothing after it could be framed.
const (
	msgExecReq     byte = 'x'
	msgExecSignal  byte = 'k'
	msgExecStarted byte = 'e'
	msgExecFailed  byte = 'f'
	msgExecExit    byte = 'y'
)

// maxExecs bounds the exec'd processes an init runs at once; one more is
// refused with EAGAIN.
const maxExecs = 1024

// execHeader is the body's fixed part: id, uid, gid, argc, envc, flags.
const execHeader = 24

// execTerminal is the flag of a process whose stdin becomes its
// controlling terminal (ExecSpec.Terminal); no other flag exists.
const execTerminal = 1

// execRequest is one process to start beside the tool.
type execRequest struct {
	ID       uint32
	UID, GID uint32
	Cwd      string
	Args     []string
	Env      []string
	Terminal bool
}

// encodeExec frames an exec request: msgExecReq, the body's length, then the
// id, uid, gid, the counts of args and env, the flags, and the cwd, each arg and each
// env string with a NUL after it. The C tail's moat_parse_exec is the twin
// of decodeExec.
func encodeExec(r *execRequest) ([]byte, error) {
	switch {
	case r.ID == 0:
		return nil, errors.New("encode exec request: id 0 is reserved")
	case len(r.Args) == 0 || r.Args[0] == "":
		return nil, errors.New("encode exec request: args must name the program")
	case !strings.HasPrefix(r.Cwd, "/"):
		return nil, fmt.Errorf("encode exec request: cwd %q is not absolute", r.Cwd)
	case r.UID == math.MaxUint32 || r.GID == math.MaxUint32:
		return nil, errors.New("encode exec request: uid or gid 4294967295 is the invalid id (-1)")
	}
	n := execHeader + len(r.Cwd) + 1
	for _, l := range []struct {
		name string
		list []string
	}{{"cwd", []string{r.Cwd}}, {"args", r.Args}, {"env", r.Env}} {
		for i, s := range l.list {
			if strings.IndexByte(s, 0) >= 0 {
				return nil, fmt.Errorf("encode exec request: %s[%d] contains a NUL byte, which execve cannot pass", l.name, i)
			}
			if l.name != "cwd" {
				n += len(s) + 1
			}
		}
	}
	if n > maxFrame {
		return nil, fmt.Errorf("encode exec request: %d bytes exceed the %d-byte limit", n, maxFrame)
	}
	b := make([]byte, 0, 5+n)
	b = append(b, msgExecReq)
	b = binary.BigEndian.AppendUint32(b, uint32(n))
	var flags uint32
	if r.Terminal {
		flags |= execTerminal
	}
	for _, v := range []uint32{r.ID, r.UID, r.GID, uint32(len(r.Args)), uint32(len(r.Env)), flags} {
		b = binary.BigEndian.AppendUint32(b, v)
	}
	b = append(append(b, r.Cwd...), 0)
	for _, list := range [][]string{r.Args, r.Env} {
		for _, s := range list {
			b = append(append(b, s...), 0)
		}
	}
	return b, nil
}

// decodeExec decodes and checks an exec body (after the type and length).
func decodeExec(body []byte) (*execRequest, error) {
	bad := func(field, reason string) error {
		return &WireError{Field: field, Reason: reason, Errno: unix.EINVAL}
	}
	if len(body) < execHeader {
		return nil, bad("(exec frame)", "is shorter than its six numbers")
	}
	var h [6]uint32
	for i := range h {
		h[i] = binary.BigEndian.Uint32(body[4*i:])
	}
	id, uid, gid, argc, envc := h[0], h[1], h[2], uint64(h[3]), uint64(h[4])
	switch {
	case id == 0:
		return nil, bad("exec.id", "is 0, which is reserved")
	case uid == math.MaxUint32 || gid == math.MaxUint32:
		return nil, bad("exec.uid", "uid or gid 4294967295 is the invalid id (-1)")
	case argc == 0:
		return nil, bad("exec.args", "names no program")
	case h[5]&^execTerminal != 0:
		return nil, bad("exec.flags", fmt.Sprintf("%#x has a flag this build does not know", h[5]))
	case 1+argc+envc > uint64(len(body)-execHeader):
		// Every string takes at least its NUL: counts beyond the bytes
		// left are refused before anything is allocated for them.
		return nil, bad("(exec frame)", "counts more strings than it has bytes")
	}
	rest := body[execHeader:]
	strs := make([]string, 0, 1+argc+envc)
	for range 1 + argc + envc {
		i := bytes.IndexByte(rest, 0)
		if i < 0 {
			return nil, bad("(exec frame)", "ends inside a string")
		}
		strs = append(strs, string(rest[:i]))
		rest = rest[i+1:]
	}
	if len(rest) != 0 {
		return nil, bad("(exec frame)", "has bytes after its last string")
	}
	r := &execRequest{ID: id, UID: uid, GID: gid, Cwd: strs[0], Args: strs[1 : 1+argc : 1+argc], Env: strs[1+argc:], Terminal: h[5]&execTerminal != 0}
	if !strings.HasPrefix(r.Cwd, "/") {
		return nil, bad("exec.cwd", fmt.Sprintf("%q is not an absolute path", r.Cwd))
	}
	if r.Args[0] == "" {
		return nil, bad("exec.args", "names no program")
	}
	return r, nil
}

// execMsg is a message of the exec protocol with two numbers: msgExecSignal
// from the launcher, msgExecStarted, msgExecFailed and msgExecExit from the
// init.
func execMsg(t byte, id, v uint32) []byte {
	b := binary.BigEndian.AppendUint32([]byte{t}, id)
	return binary.BigEndian.AppendUint32(b, v)
}

// initMsg is one message the init sends once the tool runs.
type initMsg struct {
	typ  byte
	id   uint32 // the exec's, for the exec messages
	v    uint32 // pid, errno or wait status
	rest []byte // msgError's report
}

// readInitMsg reads the next message the init sends after msgStarted (or,
// for a prepared sandbox, its answer to the request: msgStarted or msgError
// and its report). A type this build does not send is a *WireError: the
// stream cannot be framed past it.
func readInitMsg(r io.ByteReader, full func([]byte) error, report func() ([]byte, error)) (initMsg, error) {
	t, err := r.ReadByte()
	if err != nil {
		return initMsg{}, err
	}
	m := initMsg{typ: t}
	var b [8]byte
	switch t {
	case msgStarted:
		return m, nil
	case msgError:
		m.rest, err = report()
		return m, err
	case msgExit:
		if err := full(b[:4]); err != nil {
			return m, err
		}
		m.v = binary.BigEndian.Uint32(b[:4])
		return m, nil
	case msgExecStarted, msgExecFailed, msgExecExit:
		if err := full(b[:]); err != nil {
			return m, err
		}
		m.id, m.v = binary.BigEndian.Uint32(b[:4]), binary.BigEndian.Uint32(b[4:])
		return m, nil
	}
	return m, &WireError{Field: "(init message)", Reason: fmt.Sprintf("type %q is not one this build sends", t), Errno: unix.EPROTO}
}
