package nsexec

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"golang.org/x/sys/unix"
)

// The sync socket protocol (SOCK_STREAM, CLOEXEC in both processes):
//
//	parent -> child: 4-byte big-endian length, the wire JSON
//	child -> parent: msgHello
//	parent -> child: msgGo (after the placement hook)
//	child -> parent: nothing (exec closes the socket: EOF means the tool
//	                 runs), or msgError followed by a report JSON and EOF
const (
	msgHello byte = 'H'
	msgGo    byte = 'G'
	msgError byte = 'E'
)

// maxFrame bounds the config frame; the environment and a seccomp program
// of BPF_MAXINSNS instructions fit many times over.
const maxFrame = 16 << 20

// report is a SetupError on the wire.
type report struct {
	Step   Step   `json:"step"`
	Path   string `json:"path,omitempty"`
	Errno  int    `json:"errno,omitempty"`
	Detail string `json:"detail,omitempty"`
}

func encodeFrame(w *wire) ([]byte, error) {
	body, err := json.Marshal(w)
	if err != nil {
		return nil, fmt.Errorf("encode sandbox config: %w", err)
	}
	if len(body) > maxFrame {
		return nil, fmt.Errorf("encode sandbox config: %d bytes exceed the %d-byte limit", len(body), maxFrame)
	}
	return append(binary.BigEndian.AppendUint32(make([]byte, 0, 4+len(body)), uint32(len(body))), body...), nil
}

// readFrame reads the config frame in the child with plain read(2) calls.
func readFrame(fd int) (*wire, error) {
	var hdr [4]byte
	if err := readFull(fd, hdr[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n > maxFrame {
		return nil, fmt.Errorf("config frame of %d bytes: %w", n, unix.EMSGSIZE)
	}
	body := make([]byte, n)
	if err := readFull(fd, body); err != nil {
		return nil, err
	}
	var w wire
	if err := json.Unmarshal(body, &w); err != nil {
		return nil, fmt.Errorf("decode config: %w", unix.EINVAL)
	}
	if w.Config == nil || w.Config.Version != ConfigVersion {
		return nil, fmt.Errorf("config version mismatch (want %d): %w", ConfigVersion, unix.EPROTO)
	}
	return &w, nil
}

func readFull(fd int, b []byte) error {
	for len(b) > 0 {
		n, err := unix.Read(fd, b)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		if n == 0 {
			return io.ErrUnexpectedEOF
		}
		b = b[n:]
	}
	return nil
}

func writeAll(fd int, b []byte) error {
	for len(b) > 0 {
		n, err := unix.Write(fd, b)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

// decodeReport turns the child's report into a SetupError with a hint.
func decodeReport(b []byte) *SetupError {
	var r report
	if err := json.Unmarshal(b, &r); err != nil {
		return &SetupError{Step: StepUnknown, Detail: "unreadable error report from the sandbox child", Errno: unix.EPROTO}
	}
	e := &SetupError{Step: r.Step, Path: r.Path, Errno: unix.Errno(r.Errno), Detail: r.Detail}
	e.Hint = hintFor(e.Step, e.Errno)
	return e
}

// errnoOf extracts the errno of err, or EIO when there is none.
func errnoOf(err error) unix.Errno {
	var errno unix.Errno
	if errors.As(err, &errno) {
		return errno
	}
	return unix.EIO
}
