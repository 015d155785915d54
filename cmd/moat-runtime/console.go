package main

import (
	"fmt"
	"net"
	"os"

	"github.com/moat-sandbox/moat/nsexec/hostpath"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// sendConsole opens a pseudo-terminal pair, sends the master to the
// engine's --console-socket (SCM_RIGHTS, as runc does) and returns the
// slave, the container's stdio. The pty is the host's devpts: the sandbox
// gets the one slave descriptor, never the devpts mount.
func sendConsole(socket string, size *specs.Box) (*os.File, error) {
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("console: open /dev/ptmx: %w", err)
	}
	defer master.Close()
	fd := int(master.Fd())
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		return nil, fmt.Errorf("console: unlock the pty: %w", err)
	}
	// TIOCGPTPEER opens the slave from the master, with no path lookup
	// in a devpts someone else could have mounted over (runc uses it too).
	slaveFD, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.TIOCGPTPEER, uintptr(unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC))
	if errno != 0 {
		return nil, fmt.Errorf("console: open the pty's slave: %w", errno)
	}
	slave := os.NewFile(slaveFD, "pty-slave")
	if size != nil && size.Height > 0 && size.Width > 0 {
		unix.IoctlSetWinsize(int(slaveFD), unix.TIOCSWINSZ, &unix.Winsize{Row: uint16(size.Height), Col: uint16(size.Width)})
	}
	conn, err := dialSocket(socket)
	if err != nil {
		slave.Close()
		return nil, fmt.Errorf("console: connect to --console-socket %s: %w", socket, err)
	}
	defer conn.Close()
	uc := conn.(*net.UnixConn)
	if _, _, err := uc.WriteMsgUnix([]byte("/dev/ptmx"), unix.UnixRights(fd), nil); err != nil {
		slave.Close()
		return nil, fmt.Errorf("console: send the pty to %s: %w", socket, err)
	}
	return slave, nil
}

// dialSocket connects to the unix socket at path, resolved by the rule of
// nsexec/hostpath (a symlink on the way, or the socket itself, is followed
// only if root or the caller could have planted it): connect(2) follows
// every link, so another user's link could hand the pty's master to a
// socket of theirs. The socket is opened O_PATH and connected to through
// /proc/self/fd, which names that very inode (a magic link the kernel
// resolves to the open file, not a path looked up again).
func dialSocket(path string) (net.Conn, error) {
	fd, _, err := hostpath.Open(path, unix.O_PATH, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, &os.PathError{Op: "stat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return nil, fmt.Errorf("%s is not a unix socket", path)
	}
	return net.Dial("unix", fmt.Sprintf("/proc/self/fd/%d", fd))
}
