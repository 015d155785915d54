package egress

import (
	"log/slog"
	"net"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// An exchange past its heads (a tunnel, or a plain request's bodies) may
// last as long as its bytes keep moving: a download of hours is fine, a
// connection nobody uses is a slot of the caps held for nothing. A
// deadline renewed at each Read and Write would say which, but a tunnel
// is spliced in the kernel (relay), and no Read of this process sees its
// bytes. The kernel counts them on the upstream socket, though: tcp(7)'s
// TCP_INFO gives tcpi_bytes_acked (what the upstream received of what
// the tool sent) and tcpi_bytes_received (what it sent for the tool),
// Linux 4.1 and later. An idle watch reads them every quarter of the idle
// timeout and closes both sides once they have not moved for the whole
// of it, so an idle exchange ends between 1 and 1.25 timeouts after its
// last byte; the cost is one getsockopt a quarter timeout, none per byte.
// A tool that stops reading stalls the upstream's bytes too (its socket
// buffer fills, then the upstream's window closes), and so does an
// upstream that stops reading: both count as idle.

// idleWatch is the watch of one exchange.
type idleWatch struct {
	up, tool     net.Conn
	idle, period time.Duration
	logger       *slog.Logger

	mu    sync.Mutex
	timer *time.Timer
	moved uint64    // the counters' sum at the last look; 0 at the start
	since time.Time // when they last moved
	done  bool
}

// watchIdle starts the watch of an exchange between the tool's conn and
// up, a TCP connection; stop ends it. It costs a timer: the socket is
// first asked a quarter timeout later, which most exchanges never see.
func watchIdle(tool, up net.Conn, idle time.Duration, logger *slog.Logger) *idleWatch {
	// A floor on the period, so a tiny timeout cannot make it spin.
	w := &idleWatch{up: up, tool: tool, idle: idle, period: max(idle/4, time.Millisecond), logger: logger, since: time.Now()}
	w.mu.Lock() // look may run before AfterFunc returns
	w.timer = time.AfterFunc(w.period, w.look)
	w.mu.Unlock()
	return w
}

// counters reads the upstream socket's byte counters; false when it has
// none to read (closed, or not a TCP socket: then it is never idle).
func (w *idleWatch) counters() (uint64, bool) {
	sc, ok := w.up.(syscall.Conn)
	if !ok {
		return 0, false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return 0, false
	}
	var info *unix.TCPInfo
	var gerr error
	if err := raw.Control(func(fd uintptr) {
		info, gerr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
	}); err != nil || gerr != nil {
		return 0, false
	}
	return info.Bytes_acked + info.Bytes_received, true
}

func (w *idleWatch) look() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		return
	}
	now := time.Now()
	n, ok := w.counters()
	switch {
	case !ok:
		return // the socket is closed: the exchange is ending
	case n != w.moved:
		w.moved, w.since = n, now
	case now.Sub(w.since) >= w.idle:
		w.done = true
		w.logger.Debug("egress: closed an idle connection", "idle", w.idle, "to", w.up.RemoteAddr().String())
		w.up.Close()
		w.tool.Close()
		return
	}
	w.timer.Reset(w.period)
}

// stop ends the watch; the exchange's own end closes the connections.
func (w *idleWatch) stop() {
	w.mu.Lock()
	w.done = true
	w.timer.Stop()
	w.mu.Unlock()
}
