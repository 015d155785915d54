package nsexec

import (
	"os"

	"golang.org/x/sys/unix"
)

// Magic numbers of the pseudo file systems whose descriptors are handles on
// kernel objects rather than byte streams (include/uapi/linux/magic.h).
const (
	anonInodeFSMagic = 0x09041934 // epoll, eventfd, signalfd, timerfd, inotify, io_uring, bpf, perf, userfaultfd
	pidFSMagic       = 0x50494446 // pidfd (pidfs, Linux 6.9+; before, an anonymous inode)
	nsFSMagic        = 0x6e736673 // /proc/PID/ns/* (setns)
)

// CheckStdio refuses a descriptor that would hand the sandbox a door out
// of it as its stdin, stdout or stderr, with a *StdioError naming which
// and why. Pipes, sockets, terminals, character and block devices, and
// regular files (memfds included) pass; nil members (which become
// /dev/null) pass.
//
// A descriptor keeps what it was opened on whatever namespaces its holder
// enters: a directory on stdin makes /proc/self/fd/0/ (and openat(0, ...))
// the host directory, outside every mount the sandbox has, so `moat run
// 0</` listed and wrote host paths. An O_PATH descriptor is the same door
// for any file type (openat(2) with an empty path, or /proc/self/fd/N
// reopened with other flags); a namespace descriptor is a setns target;
// anonymous inodes (pidfd, io_uring, bpf, perf, userfaultfd...) are
// handles on kernel objects no tool needs as stdio. What is judged is
// fixed for the descriptor's life (its inode, and O_PATH, which F_SETFL
// cannot change), so the check cannot be raced.
func CheckStdio(s Stdio) error {
	for fd, f := range []*os.File{s.Stdin, s.Stdout, s.Stderr} {
		if f == nil {
			continue
		}
		if err := checkStdioFile(fd, f); err != nil {
			return err
		}
	}
	return nil
}

func checkStdioFile(fd int, f *os.File) error {
	sc, err := f.SyscallConn()
	if err != nil {
		return &StdioError{FD: fd, Kind: "unusable", Err: err}
	}
	var (
		flags int
		st    unix.Stat_t
		sfs   unix.Statfs_t
		opErr error
	)
	err = sc.Control(func(raw uintptr) {
		if flags, opErr = unix.FcntlInt(raw, unix.F_GETFL, 0); opErr != nil {
			return
		}
		if opErr = unix.Fstat(int(raw), &st); opErr != nil {
			return
		}
		opErr = unix.Fstatfs(int(raw), &sfs)
	})
	if err == nil {
		err = opErr
	}
	if err != nil {
		return &StdioError{FD: fd, Kind: "unusable", Err: err}
	}
	switch {
	case flags&unix.O_PATH != 0:
		return &StdioError{FD: fd, Kind: "an O_PATH descriptor"}
	case st.Mode&unix.S_IFMT == unix.S_IFDIR:
		return &StdioError{FD: fd, Kind: "a directory"}
	case st.Mode&unix.S_IFMT == unix.S_IFLNK:
		return &StdioError{FD: fd, Kind: "a symbolic link"}
	case sfs.Type == nsFSMagic:
		return &StdioError{FD: fd, Kind: "a namespace descriptor"}
	case sfs.Type == pidFSMagic:
		return &StdioError{FD: fd, Kind: "a pidfd"}
	case sfs.Type == anonInodeFSMagic || st.Mode&unix.S_IFMT == 0:
		return &StdioError{FD: fd, Kind: "an anonymous inode (epoll, eventfd, pidfd, io_uring, ...)"}
	}
	return nil
}
