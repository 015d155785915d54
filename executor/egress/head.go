package egress

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"sync"
)

// A head (an HTTP request's or response's start line and header fields)
// is read by net/http, which bounds nothing itself: http.ReadRequest and
// http.ReadResponse take a *bufio.Reader and textproto appends a line to
// its own slice until the newline comes, so 1 GiB without a newline is
// 1 GiB (and its doublings) of this process. net/http's server puts a
// counting reader under its bufio.Reader (connReader's remain,
// MaxHeaderBytes); headReader is that reader, for both sides of the proxy,
// and it counts lines as well (limits.go says why).
//
// What net/http does bound, given a bufio.Reader of the default 4 KiB:
// a chunk-size line (4096 bytes, internal/chunked.go's maxLineLength)
// and a chunked body's trailer (transfer.go's readTrailer looks for its
// end only within the bufio.Reader's buffer); a body itself is streamed,
// never held.

// errHeadTooLarge is what headReader returns once a head has used its
// bytes or lines; the readers above return it as it is (errors.Is).
var errHeadTooLarge = errors.New("moat egress: head over the limit")

// headReader passes reads through to r, and while a head is being read
// (begin to end) stops at the head's byte cap and after its line cap.
// The cap holds during the read: a Read never asks r for more than the
// head may still take, so a head over the cap costs the cap and no more.
type headReader struct {
	r io.Reader

	reading bool // between begin and end
	sniff   bool // the tool's side: a first byte 5 is SOCKS5, not HTTP
	scan    bool // count lines (off for SOCKS5, and past the head's end)
	left    int  // bytes the head may still take
	lines   int  // lines completed
	maxLine int
	lineLen int  // bytes of the current line so far, its newline excluded
	last    byte // the current line's last byte so far
	read    int  // bytes read in this head
	err     error
}

// begin starts a head of at most max bytes and maxHeadLines lines, whose
// first bytes, read ahead of a previous head's end (a pipelined request),
// are buffered: they count against both caps, and the lines are followed
// from the head's start. buffered is at most the bufio.Reader's 4 KiB,
// and max at least that (minHeaderBytes).
func (h *headReader) begin(max int, buffered []byte) {
	*h = headReader{r: h.r, sniff: h.sniff, reading: true, scan: true, left: max - len(buffered), read: len(buffered), maxLine: maxHeadLines}
	h.count(buffered)
}

// end lifts the caps: what follows (a body, a tunnel) streams.
func (h *headReader) end() { h.reading = false }

// started says whether any byte of the current head arrived.
func (h *headReader) started() bool { return h.read > 0 }

// over says whether the head ran over its lines: a head read whole from
// bytes already buffered has no Read left to fail.
func (h *headReader) over() bool { return h.lines > h.maxLine }

// cause is why a head could not be read, given the error of the reader
// above: the cap, or a timeout, when this reader met one, else err.
// bufio.Reader.ReadLine hands up a line cut short without the error that
// cut it, and textproto then calls the head malformed.
func (h *headReader) cause(err error) error {
	var ne net.Error
	if errors.Is(h.err, errHeadTooLarge) || errors.As(h.err, &ne) && ne.Timeout() {
		return h.err
	}
	return err
}

// lineTooLong says whether the head ran over before its first line ended:
// a request line too long (414) rather than too many fields (431).
func (h *headReader) lineTooLong() bool { return h.lines == 0 }

func (h *headReader) Read(b []byte) (int, error) {
	if !h.reading {
		return h.r.Read(b)
	}
	if h.left <= 0 {
		h.err = errHeadTooLarge
		return 0, h.err
	}
	if len(b) > h.left {
		b = b[:h.left]
	}
	n, err := h.r.Read(b)
	if err != nil && h.err == nil {
		h.err = err
	}
	if n > 0 && h.read == 0 && h.sniff && b[0] == socksVersion {
		// SOCKS5 frames are binary: a 0x0a byte is no line. Their lengths
		// are one byte each, so the greeting and request take at most
		// 2+255+4+1+255+2 bytes whatever is sent.
		h.scan = false
	}
	h.read += n
	h.left -= n
	if h.scan {
		n = h.count(b[:n])
	}
	return n, err
}

// count follows the lines of p, the next bytes of the head, and returns
// how many of them the head may use. At the blank line that ends the head
// it stops counting: what follows is a body read ahead. At the line that
// exceeds the cap it cuts p after that line and spends the head's bytes,
// so the next Read fails; the bytes cut are lost, and with them the
// connection, which is refused.
func (h *headReader) count(p []byte) int {
	for i := 0; i < len(p); {
		j := bytes.IndexByte(p[i:], '\n')
		if j < 0 {
			h.lineLen += len(p) - i
			h.last = p[len(p)-1]
			return len(p)
		}
		if j > 0 {
			h.lineLen += j
			h.last = p[i+j-1]
		}
		i += j + 1
		if h.lineLen == 0 || h.lineLen == 1 && h.last == '\r' {
			h.scan = false // the head's end
			return len(p)
		}
		h.lines++
		h.lineLen = 0
		if h.lines > h.maxLine {
			h.left = 0
			return i
		}
	}
	return len(p)
}

// readers pools the 4 KiB bufio.Readers of connections: every connection
// takes one for its tool's side and a plain request one for its upstream.
var readers sync.Pool

func newReader(r io.Reader) *bufio.Reader {
	if br, ok := readers.Get().(*bufio.Reader); ok {
		br.Reset(r)
		return br
	}
	return bufio.NewReader(r)
}

func freeReader(br *bufio.Reader) {
	br.Reset(nil)
	readers.Put(br)
}
