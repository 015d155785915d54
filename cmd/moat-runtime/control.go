package main

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// The monitor listens on a unix socket in the container's state directory
// (0700, so only the runtime's user reaches it; the peer's uid is checked
// too). A request is one line, the answer one line: "ok" or "error: ...".
//
//	start          the created container's process starts
//	kill SIG [all] SIG goes to the container (a created one ends)
const controlSocket = "ctl"

// controlTimeout bounds one request; a start waits for the exec.
const controlTimeout = 15 * time.Second

// request sends one request to the monitor of the container whose state
// directory is reached through at.
func request(at, line string) error {
	conn, err := net.DialTimeout("unix", at, controlTimeout)
	if err != nil {
		if errors.Is(err, unix.ECONNREFUSED) || errors.Is(err, unix.ENOENT) {
			return errNotRunning
		}
		return fmt.Errorf("reach the container's monitor: %w", err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(controlTimeout))
	if _, err := fmt.Fprintf(conn, "%s\n", line); err != nil {
		return fmt.Errorf("reach the container's monitor: %w", err)
	}
	answer, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return fmt.Errorf("the container's monitor did not answer %q: %w", line, err)
	}
	answer = strings.TrimSuffix(answer, "\n")
	if answer == "ok" {
		return nil
	}
	return errors.New(strings.TrimPrefix(answer, "error: "))
}

var errNotRunning = errors.New("the container is not running (its monitor is gone)")

// peerAllowed says whether the connecting process runs as the monitor's
// own user (or root).
func peerAllowed(c *net.UnixConn) bool {
	raw, err := c.SyscallConn()
	if err != nil {
		return false
	}
	var cred *unix.Ucred
	var cerr error
	raw.Control(func(fd uintptr) { cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) })
	return cerr == nil && (cred.Uid == uint32(os.Geteuid()) || cred.Uid == 0)
}
