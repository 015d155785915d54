package main

import (
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"
)

// termState is the termios of each of moat's stdio descriptors that is a
// terminal, taken before the run.
type termState map[int]*unix.Termios

// saveTerminal records the termios of every stdio descriptor that is a
// terminal. The filter denies what a tool could do to a terminal beyond
// the run's life by other means (line discipline, console redirect,
// serial and locked settings, exclusive mode); ordinary termios changes
// (`stty raw -echo`) stay allowed inside, so they are undone here instead.
func saveTerminal() termState {
	st := termState{}
	for fd := range 3 {
		if t, err := unix.IoctlGetTermios(fd, unix.TCGETS); err == nil {
			st[fd] = t
		}
	}
	return st
}

// restore puts back every termios the tool left changed. A moat in a
// background process group would be stopped by SIGTTOU for writing its
// terminal's settings (tcsetattr(3)); the signal is ignored for the call,
// as shells do when they take the terminal back.
func (st termState) restore() {
	changed := false
	for fd, t := range st {
		if now, err := unix.IoctlGetTermios(fd, unix.TCGETS); err == nil && *now != *t {
			changed = true
		}
	}
	if !changed {
		return
	}
	signal.Ignore(syscall.SIGTTOU)
	defer signal.Reset(syscall.SIGTTOU)
	for fd, t := range st {
		_ = unix.IoctlSetTermios(fd, unix.TCSETS, t)
	}
}
