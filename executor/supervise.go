package executor

import (
	"context"
	"errors"
	"io"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// run is one supervised child: what it wrote, how it ended and why the
// pipeline stopped it, if it did.
type run struct {
	stdout, stderr []byte
	status         ExitStatus
	// reason is the sticky stop reason (timeout, aborted, output-cap) or "";
	// cause is the context's error for an abort.
	reason Code
	cause  error
}

func (r *run) observed() observed {
	if r.status.Exited() {
		c := r.status.Code
		return observed{code: &c}
	}
	s := signalName(r.status.Signal)
	return observed{signal: &s}
}

// stopper sends the kill escalation once, for the first reason to fire
// (contract 5.5): SIGTERM to the whole tree, SIGKILL after the grace, or at
// once with a zero grace (the reference's killGraceMs 0).
//
// A stop for the output cap is sticky at once but signals a little later
// (capped): a tool that writes its last bytes past the cap and exits, as
// `printf 12345` under a cap of 5 does, has usually exited by the time the
// reference's event loop sees the data and kills it, so the reference
// records exitCode 0 (5 of 5 runs); a Go reader sees the bytes within
// microseconds and its SIGTERM landed before the tool's exit in 4 of 5.
// So the signal waits until the tool goes on writing (floodBytes more past
// the cap, a flood) or capSettle passes, whichever comes first; a tool
// that exits meanwhile keeps its own exit status. A timeout or an abort
// signals at once.
type stopper struct {
	mu        sync.Mutex
	proc      Process
	grace     time.Duration
	reason    Code
	cause     error
	signalled bool
	finished  bool
	kill      *time.Timer
	settle    *time.Timer
}

const (
	// capSettle is how long a tool that reached the output cap may take to
	// exit by itself before it is signalled.
	capSettle = 200 * time.Millisecond
	// floodBytes is how much a tool may write past the cap before it is
	// signalled without waiting: a pipe's default capacity (pipe(7)).
	floodBytes = 64 << 10
)

func (s *stopper) stop(reason Code, cause error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.reason == "" {
		s.reason, s.cause = reason, cause
	}
	s.signal()
}

// capped records the output cap as the stop reason (when it is the first)
// and signals after capSettle unless the tool is gone by then.
func (s *stopper) capped() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.reason != "" || s.finished {
		return
	}
	s.reason = CodeOutputCap
	s.settle = time.AfterFunc(capSettle, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.signal()
	})
}

// flooding signals a capped tool that goes on writing, at once.
func (s *stopper) flooding() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.reason == CodeOutputCap {
		s.signal()
	}
}

// signal sends the escalation, once; s.mu is held.
func (s *stopper) signal() {
	if s.signalled || s.finished {
		return
	}
	s.signalled = true
	if s.settle != nil {
		s.settle.Stop()
	}
	_ = s.proc.Signal(syscall.SIGTERM)
	if s.grace == 0 {
		_ = s.proc.Signal(syscall.SIGKILL)
		return
	}
	s.kill = time.AfterFunc(s.grace, func() { _ = s.proc.Signal(syscall.SIGKILL) })
}

func (s *stopper) done() (Code, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.finished = true
	if s.kill != nil {
		s.kill.Stop()
	}
	if s.settle != nil {
		s.settle.Stop()
	}
	return s.reason, s.cause
}

// supervise starts the child through the launcher and runs it to the end:
// stdin written and closed, both outputs captured under the cap, the timeout
// and the context watched. A failure to start is a spawn error (or the
// launcher's own typed error, such as a sandbox setup failure).
func (p *Pipeline) supervise(ctx context.Context, l *Launch, launcher Launcher, stdin []byte) (*run, error) {
	cfg := &p.cfg
	pipes, err := newPipes()
	if err != nil {
		return nil, newError(CodeSpawn, err, "tool '%s' could not be spawned: %v", l.Request.Tool, err)
	}
	defer pipes.closeAll()
	l.Stdin, l.Stdout, l.Stderr = pipes.child[0], pipes.child[1], pipes.child[2]
	proc, err := launcher.Launch(ctx, l)
	pipes.closeChild()
	if err != nil {
		var e *Error
		if errors.As(err, &e) {
			return nil, e
		}
		if ctx.Err() != nil {
			return nil, newError(CodeAborted, context.Cause(ctx), "%stool '%s' was cancelled", cfg.Messages.Prefix, l.Request.Tool)
		}
		return nil, spawnError(l.Request.Tool, l.Path, err)
	}

	st := &stopper{proc: proc, grace: cfg.KillGrace}
	timer := time.AfterFunc(cfg.Timeout, func() { st.stop(CodeTimeout, nil) })
	defer timer.Stop()
	watchDone := make(chan struct{})
	defer close(watchDone)
	go func() {
		select {
		case <-ctx.Done():
			st.stop(CodeAborted, context.Cause(ctx))
		case <-watchDone:
		}
	}()

	go writeStdin(pipes.parent[0], stdin)
	var wg sync.WaitGroup
	var out, errOut []byte
	wg.Add(2)
	go func() {
		defer wg.Done()
		out = capture(pipes.parent[1], cfg.MaxOutputBytes, st)
	}()
	go func() {
		defer wg.Done()
		errOut = capture(pipes.parent[2], cfg.MaxOutputBytes, nil)
	}()

	status, werr := proc.Wait()
	drained := make(chan struct{})
	go func() { wg.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(cfg.DrainTimeout):
		// Something that escaped the tree still holds a pipe: stop reading.
		pipes.closeParent()
		<-drained
	}
	reason, cause := st.done()
	if werr != nil && reason == "" {
		return nil, newError(CodeSpawn, werr, "tool '%s' could not be waited for: %v", l.Request.Tool, werr)
	}
	return &run{stdout: out, stderr: errOut, status: status, reason: reason, cause: cause}, nil
}

// capture reads r to EOF, keeping at most limit bytes. With a stopper, it
// stops the tool for the cap as soon as the kept bytes reach the limit (so
// exactly limit bytes already trips it, contract 5.6), and for a flood once
// floodBytes more came past it; reading goes on, discarding, so the writer
// never blocks on a full pipe while it is being killed.
func capture(r io.Reader, limit int, st *stopper) []byte {
	buf := make([]byte, 0, min(limit, 64<<10))
	chunk := make([]byte, 32<<10)
	capped, flooded := false, false
	past := 0
	for {
		n, err := r.Read(chunk)
		if n > 0 {
			keep := min(n, limit-len(buf))
			buf = append(buf, chunk[:keep]...)
			past += n - keep
		}
		if st != nil && !capped && len(buf) >= limit {
			capped = true
			st.capped()
		}
		if st != nil && capped && !flooded && past > floodBytes {
			flooded = true
			st.flooding()
		}
		if err != nil {
			return buf
		}
	}
}

// writeStdin writes the protocol document and closes stdin. A tool that
// exits without reading gets EPIPE here, which is swallowed: its exit status
// decides the outcome (contract 1.2).
func writeStdin(w *os.File, doc []byte) {
	_, _ = w.Write(doc)
	_ = w.Close()
}

// pipes holds the three stdio pipes of one dispatch: child ends (given to
// the launcher) and parent ends (kept here).
type pipes struct {
	child, parent [3]*os.File
	once          [2]sync.Once
}

func newPipes() (*pipes, error) {
	p := &pipes{}
	for i := range 3 {
		r, w, err := os.Pipe()
		if err != nil {
			p.closeAll()
			return nil, err
		}
		if i == 0 {
			p.child[i], p.parent[i] = r, w
		} else {
			p.child[i], p.parent[i] = w, r
		}
	}
	return p, nil
}

func (p *pipes) closeChild() {
	p.once[0].Do(func() {
		for _, f := range p.child {
			if f != nil {
				f.Close()
			}
		}
	})
}

func (p *pipes) closeParent() {
	p.once[1].Do(func() {
		for _, f := range p.parent {
			if f != nil {
				f.Close()
			}
		}
	})
}

func (p *pipes) closeAll() { p.closeChild(); p.closeParent() }

// signalName is the signal's name as Node reports it ("SIGKILL").
func signalName(sig syscall.Signal) string {
	if name := unix.SignalName(sig); name != "" {
		return name
	}
	return "SIG" + sig.String()
}
