//go:build linux && !amd64

package nsexec

import (
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"
)

// On architectures without the init's own signal handler
// (signals_amd64.go), the init subscribes through os/signal.

// signals is the init's subscription: fwd receives the signals to forward
// once done is closed.
type signals struct {
	fwd  chan os.Signal
	done chan struct{}
}

// subscribe asks the Go runtime for every signal the init forwards.
// os/signal enables one signal at a time, each a round trip to the
// runtime's signal thread (runtime ensureSigM), about 1 to 2 ms of CPU for
// all of them; so it runs beside the setup (and before a prepared sandbox
// waits for its request), off the critical path. A signal that arrives
// meanwhile is queued and reaches the tool once it runs.
func (c *child) subscribe() {
	c.sig.fwd = make(chan os.Signal, 64)
	c.sig.done = make(chan struct{})
	go func() {
		signal.Notify(c.sig.fwd, forwarded()...)
		close(c.sig.done)
	}()
}

// subscribed waits until the subscription is complete.
func (c *child) subscribed() { <-c.sig.done }

// supervise forwards signals to the tool and reaps until the tool is gone,
// then reports its status and exits. A goroutine waits in wait4(2), which
// reaps the children of every thread of the init: the tool's exit wakes it
// directly, without the round trips of a SIGCHLD through the Go runtime's
// signal goroutine. The forwarding stays on the exec thread: only that
// thread has the tool's credentials (the identity switch is per thread), so
// only its kill(2) passes the permission check when the launcher is root.
func (c *child) supervise(tool int) {
	go watchLauncher(c.sync)
	go func() {
		for {
			var ws unix.WaitStatus
			pid, err := unix.Wait4(-1, &ws, 0, nil)
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				os.Exit(exitSetup) // ECHILD: the tool is gone unseen, cannot happen
			}
			if pid == tool {
				c.exit(ws)
			}
			// An orphan re-parented to the init: reaped, nothing more.
		}
	}()
	for s := range c.sig.fwd {
		// A signal the tool sent to pid 1 comes back to it; the init itself
		// never acts on one.
		_ = unix.Kill(tool, s.(syscall.Signal))
	}
}

// forwarded lists every signal a process can catch but SIGCHLD, which is
// the init's own (it reaps in wait4): 1 to 31 without SIGKILL and SIGSTOP,
// and the real-time signals from SIGRTMIN (34; glibc keeps 32 and 33). A
// signal the init inherited as ignored stays ignored, so the tool inherits
// that too, as it would outside.
func forwarded() []os.Signal {
	sigs := make([]os.Signal, 0, 60)
	for _, s := range forwardable() {
		if !signal.Ignored(s) {
			sigs = append(sigs, s)
		}
	}
	return sigs
}

// startDrop and finishDrop do nothing here: only the amd64 handler can make
// the init's other threads drop their credentials (signals_linux_amd64.go),
// so on other architectures they keep the setup's.
func (c *child) startDrop(dir int, path string) error { return nil }

func (c *child) finishDrop() error { return nil }
