package egress

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Usage is what one sandbox did through the proxy.
type Usage struct {
	// Connections counts the destinations the proxy connected to.
	Connections int64
	// Denials counts refused requests: destinations the policy does not
	// allow, connections beyond the sandbox's or the proxy's cap, and
	// heads over the limits (431, 414).
	Denials int64
	// BytesOut and BytesIn count the bytes the tool sent to and received
	// from the proxy (request heads and tunnelled data alike).
	BytesOut, BytesIn int64
}

// Sandbox is one sandbox's door to the proxy: its socket, allowlist,
// counters and connection cap.
type Sandbox struct {
	proxy  *Proxy
	allow  *Allowlist
	ln     net.Listener // a unix socket's (Open) or a loopback port's (OpenLoopback)
	path   string       // the unix socket's, "" for a loopback port
	logger *slog.Logger
	sem    chan struct{}

	connected, denials, out, in          atomic.Int64
	lastCapLog, lastPeerLog, lastHeadLog atomic.Int64

	// peers are the host uids besides this process's own that may
	// connect (Admit): the sandbox's, when it runs as another id.
	peers atomic.Pointer[uidRange]

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup

	// ctx ends with Close, so a handler still resolving or dialling
	// returns at once instead of holding Close for its timeouts.
	ctx    context.Context
	cancel context.CancelFunc
}

// Socket is the host path of the sandbox's unix socket, to bind into it
// ("" for a sandbox of OpenLoopback).
func (s *Sandbox) Socket() string { return s.path }

// uidRange is first..first+count-1.
type uidRange struct{ first, count uint32 }

// Admit lets a peer whose host uid is in first..first+count-1 connect to
// the socket, besides one of this process's user: the sandbox's id when
// it runs as another (root's sandboxes). Call it before the sandbox
// starts; a later call replaces the range.
func (s *Sandbox) Admit(first, count uint32) { s.peers.Store(&uidRange{first, count}) }

// admits says whether a connection's peer, by its credentials as the
// kernel recorded them at connect(2) (SO_PEERCRED, unix(7)), is this
// process's user or an admitted one. The socket's name can be learned from
// /proc/net/unix by any user of the host, and its mode lets the sandbox's
// id connect; without this, such a user would reach the network with the
// sandbox's allowlist, from this process's uid, and be counted as the
// sandbox.
// A loopback port's peer has no SO_PEERCRED: its uid is the owner of the
// peer's socket (tcpPeerUID, loopback.go), and its pid unknown (0).
func (s *Sandbox) admits(c net.Conn) (uid uint32, pid int32, ok bool) {
	switch conn := c.(type) {
	case *net.UnixConn:
		raw, err := conn.SyscallConn()
		if err != nil {
			return 0, 0, false
		}
		var cred *unix.Ucred
		var cerr error
		if err := raw.Control(func(fd uintptr) { cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) }); err != nil || cerr != nil {
			return 0, 0, false
		}
		uid, pid = cred.Uid, cred.Pid
	case *net.TCPConn:
		var err error
		if uid, err = tcpPeerUID(conn); err != nil {
			s.logger.Warn("egress denied: the peer's socket is not in /proc/net/tcp", "err", err)
			return 0, 0, false
		}
	default:
		return 0, 0, false
	}
	if uid == uint32(os.Geteuid()) {
		return uid, pid, true
	}
	r := s.peers.Load()
	return uid, pid, r != nil && uid >= r.first && uint64(uid) < uint64(r.first)+uint64(r.count)
}

// Usage returns the counters so far (final once Close returned).
func (s *Sandbox) Usage() Usage {
	return Usage{Connections: s.connected.Load(), Denials: s.denials.Load(), BytesOut: s.out.Load(), BytesIn: s.in.Load()}
}

// Close stops the socket, ends every open connection of the sandbox and
// waits for them.
func (s *Sandbox) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.cancel()
	err := s.ln.Close()
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	s.proxy.mu.Lock()
	delete(s.proxy.open, s)
	s.proxy.mu.Unlock()
	return err
}

// track registers c (a connection of either side) to be closed by Close;
// false when the sandbox is already closed.
func (s *Sandbox) track(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.conns[c] = struct{}{}
	return true
}

func (s *Sandbox) untrack(c net.Conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	c.Close()
}

// serve accepts until Close. Each connection takes a slot of the
// sandbox's cap; a connection beyond it is closed at once, so a tool that
// floods its socket holds at most the cap of descriptors and goroutines of
// this process, and other sandboxes, with their own sockets and caps, are
// not slowed.
func (s *Sandbox) serve() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return // closed
		}
		// Each refusal is counted before the close the peer sees, so what
		// Usage says when the peer learns of it already holds it.
		if uid, pid, ok := s.admits(c); !ok {
			s.denials.Add(1)
			c.Close()
			if now := time.Now().Unix(); s.lastPeerLog.Swap(now) != now {
				s.logger.Warn("egress denied: a connection from a process that is not the sandbox", "uid", uid, "pid", pid)
			}
			continue
		}
		select {
		case s.sem <- struct{}{}:
		default:
			s.denials.Add(1)
			c.Close()
			// One line a second at most: the flood must not become a log flood.
			if now := time.Now().Unix(); s.lastCapLog.Swap(now) != now {
				s.logger.Warn("egress denied: connection cap reached", "cap", cap(s.sem))
			}
			continue
		}
		// The proxy's cap across sandboxes, after the sandbox's own: a
		// sandbox over its own cap takes nothing of the others' share.
		if p := s.proxy; p.conns.Add(1) > int64(p.maxTotalConns) {
			p.conns.Add(-1)
			<-s.sem
			s.denials.Add(1) // before the close the tool sees
			c.Close()
			// One line a second for the whole proxy, whichever sandbox.
			if now := time.Now().Unix(); p.lastCapLog.Swap(now) != now {
				s.logger.Warn("egress denied: the proxy's connection cap across sandboxes reached", "cap", p.maxTotalConns)
			}
			continue
		}
		if !s.track(c) {
			c.Close()
			s.proxy.conns.Add(-1)
			<-s.sem
			return
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer func() { s.proxy.conns.Add(-1); <-s.sem }()
			defer s.untrack(c)
			s.handle(&counted{Conn: c, s: s})
		}()
	}
}

// handle serves one connection: SOCKS5 when its first byte is version 5,
// else HTTP. Every read of the tool's side goes through h, which caps a
// head while one is read.
func (s *Sandbox) handle(c net.Conn) {
	h := &headReader{r: c, sniff: true}
	br := newReader(h)
	defer freeReader(br)
	h.begin(s.proxy.maxHeaderBytes, nil)
	c.SetReadDeadline(time.Now().Add(s.proxy.headTimeout))
	first, err := br.Peek(1)
	if err != nil {
		return
	}
	if first[0] == socksVersion {
		s.socks(c, br, h)
		return
	}
	h.sniff = false
	s.http(c, br, h)
}

// tooLarge counts and logs (one line a second) a head over the limits.
func (s *Sandbox) tooLarge(what string) {
	s.denials.Add(1)
	if now := time.Now().Unix(); s.lastHeadLog.Swap(now) != now {
		s.logger.Warn("egress denied: "+what+" over the proxy's limit", "bytes", s.proxy.maxHeaderBytes, "lines", maxHeadLines)
	}
}

// denied counts and logs a refusal.
func (s *Sandbox) denied(proto string, d *Denial) {
	s.denials.Add(1)
	s.logger.Warn("egress denied", "err", net.JoinHostPort(d.Host, strconv.Itoa(int(d.Port)))+": "+d.Reason, "proto", proto)
}

// relay copies both ways until both directions are done, then closes up.
// The tool side's buffered bytes (read past the request head, and counted
// then) go first; the rest is copied between the bare connections, so the
// kernel splices TCP and unix sockets without a copy through this process
// (net.TCPConn.ReadFrom), and io.Copy's totals are the counters. A tunnel
// lasts while its bytes move (idle.go).
func (s *Sandbox) relay(tool net.Conn, buffered *bufio.Reader, up net.Conn) {
	if !s.track(up) {
		up.Close()
		return
	}
	defer s.untrack(up)
	tool.SetDeadline(time.Time{})
	defer watchIdle(tool, up, s.proxy.idleTimeout, s.logger).stop()
	raw := tool
	if c, ok := tool.(*counted); ok {
		raw = c.Conn
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if n := buffered.Buffered(); n > 0 {
			b, _ := buffered.Peek(n)
			if _, err := up.Write(b); err != nil {
				closeWrite(up)
				return
			}
		}
		n, _ := io.Copy(up, raw)
		s.out.Add(n)
		closeWrite(up)
	}()
	n, _ := io.Copy(raw, up)
	s.in.Add(n)
	closeWrite(raw)
	<-done
}

func closeWrite(c net.Conn) {
	switch c := c.(type) {
	case interface{ CloseWrite() error }:
		c.CloseWrite()
	case *counted:
		closeWrite(c.Conn)
	default:
		c.Close()
	}
}

// counted counts the bytes of the tool's side of a connection.
type counted struct {
	net.Conn
	s *Sandbox
}

func (c *counted) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.s.out.Add(int64(n))
	return n, err
}

func (c *counted) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.s.in.Add(int64(n))
	return n, err
}
