package nsexec

import (
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The egress forwarder: the sandbox's network namespace has no route out,
// and the host's filtering proxy (package executor/egress) is reachable
// only through its unix socket, bound into the sandbox at Egress.Socket.
// Tools expect a proxy at a TCP address (HTTP_PROXY and its kin), so the
// init listens on 127.0.0.1:Egress.Port and relays each connection to the
// socket, byte for byte: the proxy does all the filtering, the forwarder
// none.
//
// The listening socket is made during the setup, before the filter: a
// policy may allow the tool only AF_UNIX sockets and still use egress.
// The relay itself starts once the tool runs, after the init closed what it
// inherited (startTool), because it starts the Go runtime's netpoller,
// whose descriptors that close would take.

// listenEgress opens the forwarder's listening socket (close-on-exec, so
// the tool does not inherit it).
func listenEgress(port uint16) (int, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); err == nil {
		err = unix.Bind(fd, &unix.SockaddrInet4{Port: int(port), Addr: [4]byte{127, 0, 0, 1}})
		if err == nil {
			err = unix.Listen(fd, 128)
		}
		if err == nil {
			return fd, nil
		}
	}
	unix.Close(fd)
	return -1, err
}

// closeAbove closes every descriptor above fd but keep (-1: none).
func closeAbove(fd, keep int) error {
	if keep <= fd {
		return closeRange(uint(fd)+1, ^uint(0))
	}
	if keep > fd+1 {
		if err := closeRange(uint(fd)+1, uint(keep)-1); err != nil {
			return err
		}
	}
	return closeRange(uint(keep)+1, ^uint(0))
}

// forwardEgress relays every connection accepted on the listening socket
// lfd to the unix socket at path, until the init exits.
func forwardEgress(lfd int, path string) {
	f := os.NewFile(uintptr(lfd), "egress")
	ln, err := net.FileListener(f)
	f.Close()
	if err != nil {
		return // the tool's connects are refused: fails closed
	}
	for {
		c, err := ln.Accept()
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			// Out of descriptors, say: the tool's own doing; try again later.
			time.Sleep(10 * time.Millisecond)
			continue
		}
		go relayEgress(c, path)
	}
}

func relayEgress(c net.Conn, path string) {
	defer c.Close()
	up, err := net.Dial("unix", path)
	if err != nil {
		return
	}
	defer up.Close()
	toUp, err := noSigPipe(up)
	if err != nil {
		return
	}
	toTool, err := noSigPipe(c)
	if err != nil {
		return
	}
	done := make(chan struct{})
	go func() {
		io.Copy(toUp, c)
		up.(*net.UnixConn).CloseWrite()
		close(done)
	}()
	io.Copy(toTool, up)
	c.(*net.TCPConn).CloseWrite()
	<-done
}

// sendWriter writes with MSG_NOSIGNAL. A plain write(2) to a connection
// its peer closed raises SIGPIPE, and the init, which forwards every
// signal it gets to the tool, would pass it on: a shell as the tool dies of
// it. send(2) with MSG_NOSIGNAL gets EPIPE alone.
type sendWriter struct{ rc syscall.RawConn }

func noSigPipe(c net.Conn) (sendWriter, error) {
	rc, err := c.(syscall.Conn).SyscallConn()
	return sendWriter{rc}, err
}

func (w sendWriter) Write(p []byte) (int, error) {
	written := 0
	for written < len(p) {
		var n int
		var err error
		if werr := w.rc.Write(func(fd uintptr) bool {
			n, err = unix.SendmsgN(int(fd), p[written:], nil, nil, unix.MSG_NOSIGNAL)
			return err != unix.EAGAIN
		}); werr != nil {
			return written, werr
		}
		if err != nil {
			return written, err
		}
		written += n
	}
	return written, nil
}
