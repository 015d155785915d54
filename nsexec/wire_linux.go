package nsexec

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"golang.org/x/sys/unix"
)

// The sync socket protocol (SOCK_STREAM, CLOEXEC in both processes):
//
//	parent -> child: 4-byte big-endian length, the wire JSON
//	child -> parent: msgHello
//	parent -> child: msgGo (after the placement hook)
//	child -> parent: msgStarted once the tool was exec'd (the init stays
//	                 pid 1), or msgError followed by a report JSON and EOF;
//	                 when tracing, msgTrace and numMarks int64 first
//	child -> parent: msgExit and the tool's 4-byte big-endian wait status
//	                 once the init reaped it, then EOF as the init exits
//
// The parent keeps its end open while the sandbox runs: the init ends the
// sandbox when it reads EOF there (pid1_linux.go).
//
// A deferred child (Prepare) says msgReady instead of starting the tool and
// waits:
//
//	parent -> child: 4-byte big-endian length, the request (encodeRequest),
//	                 with the three stdio descriptors as SCM_RIGHTS on its
//	                 first byte
//	child -> parent: msgStarted or msgError and a report, as above
const (
	msgHello byte = 'H'
	msgGo    byte = 'G'
	msgError byte = 'E'
	msgReady byte = 'R'
	msgTrace byte = 'T'
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
	return decodeFrame(body)
}

// encodeRequest frames a deferred child's request. The body is binary, not
// JSON, so that the init's C tail (tail_linux.go) parses it with a few
// bounds checks: the 4-byte big-endian counts of args and env, then each
// string with a NUL after it, and nothing else. A string with a NUL in it
// could not reach execve(2) whole, so it is refused here.
func encodeRequest(r *request) ([]byte, error) {
	if len(r.Args) == 0 || r.Args[0] == "" {
		return nil, errors.New("encode sandbox request: args must name the tool")
	}
	n := 8
	for _, l := range []struct {
		name string
		list []string
	}{{"args", r.Args}, {"env", r.Env}} {
		for i, s := range l.list {
			if strings.IndexByte(s, 0) >= 0 {
				return nil, fmt.Errorf("encode sandbox request: %s[%d] contains a NUL byte, which execve cannot pass", l.name, i)
			}
			n += len(s) + 1
		}
	}
	if n > maxFrame {
		return nil, fmt.Errorf("encode sandbox request: %d bytes exceed the %d-byte limit", n, maxFrame)
	}
	b := make([]byte, 0, 4+n)
	b = binary.BigEndian.AppendUint32(b, uint32(n))
	b = binary.BigEndian.AppendUint32(b, uint32(len(r.Args)))
	b = binary.BigEndian.AppendUint32(b, uint32(len(r.Env)))
	for _, list := range [][]string{r.Args, r.Env} {
		for _, s := range list {
			b = append(append(b, s...), 0)
		}
	}
	return b, nil
}

// readRequest reads a deferred child's request and the three descriptors
// that come with it (received close-on-exec).
func readRequest(fd int) (*request, []int, error) {
	var hdr [4]byte
	oob := make([]byte, unix.CmsgSpace(3*4))
	var fds []int
	for got := 0; got < len(hdr); {
		n, oobn, _, _, err := unix.Recvmsg(fd, hdr[got:], oob, unix.MSG_CMSG_CLOEXEC)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, nil, err
		}
		if oobn > 0 {
			msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
			if err != nil {
				return nil, nil, err
			}
			for _, m := range msgs {
				rights, err := unix.ParseUnixRights(&m)
				if err != nil {
					return nil, nil, err
				}
				fds = append(fds, rights...)
			}
		}
		if n == 0 {
			return nil, nil, io.ErrUnexpectedEOF
		}
		got += n
	}
	if len(fds) != 3 {
		return nil, fds, fmt.Errorf("request with %d descriptors, want 3: %w", len(fds), unix.EPROTO)
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n > maxFrame {
		return nil, fds, fmt.Errorf("request frame of %d bytes: %w", n, unix.EMSGSIZE)
	}
	body := make([]byte, n)
	if err := readFull(fd, body); err != nil {
		return nil, fds, err
	}
	r, err := decodeRequest(body)
	return r, fds, err
}

// writeMarks sends the child's stage marks (msgTrace).
func writeMarks(fd int, m *[numMarks]int64) error {
	b := make([]byte, 1, 1+8*numMarks)
	b[0] = msgTrace
	for _, v := range m {
		b = binary.NativeEndian.AppendUint64(b, uint64(v))
	}
	return writeAll(fd, b)
}

// readMarks reads what writeMarks sent after its msgTrace byte.
func readMarks(r io.Reader, m *[numMarks]int64) error {
	var b [8 * numMarks]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return err
	}
	for i := range m {
		m[i] = int64(binary.NativeEndian.Uint64(b[8*i:]))
	}
	return nil
}

// monotonic is CLOCK_MONOTONIC in nanoseconds, the clock the parent and the
// child share for stage marks.
func monotonic() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
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
