package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"

	"golang.org/x/sys/unix"
)

// The runtime's own processes talk over unix stream sockets in JSON lines:
// create to its monitor (handoff.go), the runtime's commands to a
// container's monitor (control.go). Descriptors travel as SCM_RIGHTS
// attached to a line. The peer is the runtime's own user (the control
// socket checks it), yet each side bounds what it reads.

// maxLine bounds one line: an exec's process (its args and environment)
// fits with room to spare.
const maxLine = 4 << 20

// maxLineFDs bounds the descriptors that may come with one line.
const maxLineFDs = 8

// lineConn reads lines, and the descriptors that came with them, from a
// unix stream socket.
type lineConn struct {
	c   *net.UnixConn
	buf []byte
	fds []int
}

// readLine decodes the next line into v and returns the descriptors that
// arrived with it (or, in a stream, before it since the last line).
func (l *lineConn) readLine(v any) ([]*os.File, error) {
	for {
		if i := bytes.IndexByte(l.buf, '\n'); i >= 0 {
			line := l.buf[:i]
			l.buf = l.buf[i+1:]
			files := make([]*os.File, len(l.fds))
			for k, fd := range l.fds {
				files[k] = os.NewFile(uintptr(fd), "received")
			}
			l.fds = nil
			if err := json.Unmarshal(line, v); err != nil {
				closeAll(files)
				return nil, fmt.Errorf("a malformed message: %w", err)
			}
			return files, nil
		}
		if len(l.buf) > maxLine {
			l.drop()
			return nil, fmt.Errorf("a message longer than %d bytes", maxLine)
		}
		b := make([]byte, 64<<10)
		oob := make([]byte, unix.CmsgSpace(maxLineFDs*4))
		n, oobn, flags, _, err := l.c.ReadMsgUnix(b, oob)
		if oobn > 0 {
			msgs, perr := unix.ParseSocketControlMessage(oob[:oobn])
			for _, m := range msgs {
				if rights, err := unix.ParseUnixRights(&m); err == nil {
					for _, fd := range rights {
						unix.CloseOnExec(fd)
					}
					l.fds = append(l.fds, rights...)
				}
			}
			if perr == nil && (flags&unix.MSG_CTRUNC != 0 || len(l.fds) > maxLineFDs) {
				err = errors.New("too many descriptors with one message")
			}
		}
		if err != nil {
			l.drop()
			return nil, err
		}
		if n == 0 {
			l.drop()
			return nil, errors.New("the peer closed the connection")
		}
		l.buf = append(l.buf, b[:n]...)
	}
}

// drop closes descriptors received and not handed out.
func (l *lineConn) drop() {
	for _, fd := range l.fds {
		unix.Close(fd)
	}
	l.fds = nil
}

// writeLine sends v as one line, with files attached (SCM_RIGHTS).
func writeLine(c *net.UnixConn, v any, files ...*os.File) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	var oob []byte
	if len(files) > 0 {
		fds := make([]int, len(files))
		for i, f := range files {
			fds[i] = int(f.Fd())
		}
		oob = unix.UnixRights(fds...)
	}
	n, _, err := c.WriteMsgUnix(b, oob, nil)
	if err == nil && n < len(b) {
		_, err = c.Write(b[n:])
	}
	return err
}

func closeAll(files []*os.File) {
	for _, f := range files {
		if f != nil {
			f.Close()
		}
	}
}
