package egress

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"slices"
)

// The SOCKS5 server part (RFC 1928) is written here rather than taken from
// a package: golang.org/x/net/proxy is a client only, and the server
// packages (armon/go-socks5 and its forks) are unmaintained or bring
// their own resolver and dialer, where every connect must go through
// Sandbox.dial's checks. What is needed is small: no authentication, the
// CONNECT command, and the three address types, a host name resolved here.

const (
	socksVersion    = 5
	socksNoAuth     = 0
	socksNoMethod   = 0xff
	socksCmdConnect = 1
	socksAtypIPv4   = 1
	socksAtypName   = 3
	socksAtypIPv6   = 4
)

// SOCKS5 reply codes (RFC 1928 section 6).
const (
	socksOK              = 0
	socksGeneralFailure  = 1
	socksNotAllowed      = 2 // connection not allowed by ruleset
	socksHostUnreachable = 4
	socksRefused         = 5
	socksCmdUnsupported  = 7
	socksAtypUnsupported = 8
)

// socks serves one SOCKS5 exchange. Its frames are length-prefixed by
// single bytes, so what it reads is bounded however the tool lies, and
// all of it comes within the head timeout handle set, which no trickle
// renews; h keeps its byte cap until the tunnel starts.
func (s *Sandbox) socks(c net.Conn, br *bufio.Reader, h *headReader) {
	// Greeting: VER NMETHODS METHODS...
	var hdr [2]byte
	if _, err := io.ReadFull(br, hdr[:]); err != nil {
		return
	}
	methods := make([]byte, hdr[1])
	if _, err := io.ReadFull(br, methods); err != nil {
		return
	}
	if !slices.Contains(methods, socksNoAuth) {
		s.answer(c, []byte{socksVersion, socksNoMethod})
		return
	}
	if s.answer(c, []byte{socksVersion, socksNoAuth}) != nil {
		return
	}
	// Request: VER CMD RSV ATYP DST.ADDR DST.PORT
	var req [4]byte
	if _, err := io.ReadFull(br, req[:]); err != nil || req[0] != socksVersion {
		return
	}
	host, port, code := readSocksAddr(br, req[3])
	if code != socksOK {
		s.socksReply(c, code)
		return
	}
	if req[1] != socksCmdConnect {
		s.socksReply(c, socksCmdUnsupported)
		return
	}
	up, err := s.dial(s.ctx, host, port)
	if err != nil {
		var d *Denial
		var u *UnreachableError
		switch {
		case errors.As(err, &d):
			s.denied("socks5", d)
			s.socksReply(c, socksNotAllowed)
		case errors.As(err, &u) && u.Resolve:
			s.socksReply(c, socksHostUnreachable)
		default:
			s.socksReply(c, socksRefused)
		}
		return
	}
	s.connected.Add(1)
	if s.socksReply(c, socksOK) != nil {
		up.Close()
		return
	}
	h.end()
	s.relay(c, br, up)
}

// readSocksAddr reads DST.ADDR of type atyp and DST.PORT.
func readSocksAddr(br *bufio.Reader, atyp byte) (string, uint16, byte) {
	var host string
	switch atyp {
	case socksAtypIPv4, socksAtypIPv6:
		n := 4
		if atyp == socksAtypIPv6 {
			n = 16
		}
		b := make([]byte, n)
		if _, err := io.ReadFull(br, b); err != nil {
			return "", 0, socksGeneralFailure
		}
		ip, _ := netip.AddrFromSlice(b)
		host = ip.String()
	case socksAtypName:
		l, err := br.ReadByte()
		if err != nil || l == 0 {
			return "", 0, socksGeneralFailure
		}
		b := make([]byte, l)
		if _, err := io.ReadFull(br, b); err != nil {
			return "", 0, socksGeneralFailure
		}
		host = string(b)
	default:
		return "", 0, socksAtypUnsupported
	}
	var p [2]byte
	if _, err := io.ReadFull(br, p[:]); err != nil {
		return "", 0, socksGeneralFailure
	}
	return host, binary.BigEndian.Uint16(p[:]), socksOK
}

// socksReply answers with code and a zero IPv4 bound address.
func (s *Sandbox) socksReply(c net.Conn, code byte) error {
	return s.answer(c, []byte{socksVersion, code, 0, socksAtypIPv4, 0, 0, 0, 0, 0, 0})
}
