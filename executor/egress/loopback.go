package egress

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
)

// A sandbox of the no-userns rung (nsexec.ModeNoUserNS) shares the host's
// network namespace: no unix socket can be bound into it, and the tool's
// only way out is a TCP connect to one port, the one its Landlock domain
// allows. OpenLoopback gives such a sandbox a port of its own on
// 127.0.0.1, an ephemeral one, which the tool reaches directly.
//
// Every user of the host can connect to a loopback port, and there is no
// SO_PEERCRED for TCP. The peer's uid is instead the owner of the peer's
// socket as the kernel lists it in /proc/net/tcp (proc(5), "/proc/net/tcp":
// the uid column is sock_i_uid, the socket's creator's fsuid): the one
// socket of this network namespace whose local address is the accepted
// connection's remote address and whose remote address is its local one.
// A connection is admitted as a unix socket's is (Sandbox.admits): this
// process's uid, which is the sandbox's in that rung, or an admitted one;
// a peer whose socket is not found (closed already, or a time-wait entry,
// which the kernel lists with uid 0) is refused, so a stranger's race
// fails closed.

// OpenLoopback gives one sandbox a listening port on 127.0.0.1 (Addr),
// serving allow, as Open gives one a unix socket. attrs go on every log
// line of this sandbox. Close the Sandbox when the sandbox is gone.
func (p *Proxy) OpenLoopback(allow *Allowlist, attrs ...any) (*Sandbox, error) {
	if allow == nil {
		return nil, errors.New("egress: open a sandbox: no allowlist")
	}
	ln, err := net.ListenTCP("tcp4", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return nil, fmt.Errorf("egress: listen on 127.0.0.1: %w", err)
	}
	return p.start(allow, ln, "", attrs)
}

// Addr is the address the sandbox's proxy listens on: the unix socket's
// path, or 127.0.0.1 and the port of OpenLoopback ("127.0.0.1:41234").
func (s *Sandbox) Addr() string {
	if s.path != "" {
		return s.path
	}
	return s.ln.Addr().String()
}

// Port is the loopback port of a sandbox of OpenLoopback (0 for Open's).
func (s *Sandbox) Port() uint16 {
	if a, ok := s.ln.Addr().(*net.TCPAddr); ok {
		return uint16(a.Port)
	}
	return 0
}

// tcpStates the kernel lists a socket in that no live peer is in
// (include/net/tcp_states.h): TIME_WAIT (a timewait sock, printed with uid
// 0), SYN_RECV (a request sock) and LISTEN.
var tcpStates = map[string]bool{"06": true, "03": true, "0A": true}

// tcpPeerUID is the uid owning the peer's socket of c, a connection
// accepted on a loopback port (the comment above). A v4 peer is listed in
// /proc/net/tcp, a v6 socket connected to a v4-mapped address in
// /proc/net/tcp6.
func tcpPeerUID(c *net.TCPConn) (uint32, error) {
	local, lok := c.LocalAddr().(*net.TCPAddr)
	remote, rok := c.RemoteAddr().(*net.TCPAddr)
	if !lok || !rok {
		return 0, errors.New("egress: a TCP connection without addresses")
	}
	l, lok := netip.AddrFromSlice(local.IP)
	r, rok := netip.AddrFromSlice(remote.IP)
	if !lok || !rok {
		return 0, errors.New("egress: a TCP connection without addresses")
	}
	for _, table := range []struct {
		path string
		v6   bool
	}{{"/proc/net/tcp", false}, {"/proc/net/tcp6", true}} {
		// The peer's own socket: its local address is our remote one.
		want := procAddr(r, remote.Port, table.v6) + " " + procAddr(l, local.Port, table.v6)
		uid, found, err := findSocket(table.path, want)
		if err != nil {
			return 0, err
		}
		if found {
			return uid, nil
		}
	}
	return 0, fmt.Errorf("egress: no socket of %v connected to %v", remote, local)
}

// findSocket scans a /proc/net/tcp table for a live socket whose local and
// remote addresses are pair, and returns its uid.
func findSocket(path, pair string) (uint32, bool, error) {
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return 0, false, nil // no IPv6 in this kernel
		}
		return 0, false, fmt.Errorf("egress: find the peer's socket: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// "sl local_address rem_address st tx:rx tr:when retrnsmt uid ..."
		fields := strings.Fields(sc.Text())
		if len(fields) < 8 || fields[1]+" "+fields[2] != pair || tcpStates[fields[3]] {
			continue
		}
		uid, err := strconv.ParseUint(fields[7], 10, 32)
		if err != nil {
			return 0, false, fmt.Errorf("egress: find the peer's socket: the uid %q of %s: %w", fields[7], path, err)
		}
		return uint32(uid), true, nil
	}
	if err := sc.Err(); err != nil {
		return 0, false, fmt.Errorf("egress: find the peer's socket: %w", err)
	}
	return 0, false, nil
}

// procAddr spells an address and port as /proc/net/tcp does
// (net/ipv4/tcp_ipv4.c get_tcp4_sock, net/ipv6/tcp_ipv6.c get_tcp6_sock):
// each 32-bit word of the address in network order printed as the host
// reads it (%08X of the raw word), then ':' and the port (%04X). For
// tcp6, an IPv4 address is the v4-mapped one.
func procAddr(a netip.Addr, port int, v6 bool) string {
	var b []byte
	if v6 {
		s := a.As16()
		b = s[:]
	} else {
		if !a.Unmap().Is4() {
			return "-" // no v6 peer in the v4 table
		}
		s := a.Unmap().As4()
		b = s[:]
	}
	var sb strings.Builder
	for i := 0; i < len(b); i += 4 {
		fmt.Fprintf(&sb, "%08X", binary.NativeEndian.Uint32(b[i:i+4]))
	}
	fmt.Fprintf(&sb, ":%04X", port)
	return sb.String()
}
