//go:build linux

package nsexec

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"
)

// execBody builds an exec body field by field, hostile ones included,
// with no flag.
func execBody(id, uid, gid, argc, envc uint32, strs ...string) []byte {
	return execBodyFlags(id, uid, gid, argc, envc, 0, strs...)
}

// execBodyFlags is execBody with the flags word given.
func execBodyFlags(id, uid, gid, argc, envc, flags uint32, strs ...string) []byte {
	var b []byte
	for _, v := range []uint32{id, uid, gid, argc, envc, flags} {
		b = binary.BigEndian.AppendUint32(b, v)
	}
	for _, s := range strs {
		b = append(append(b, s...), 0)
	}
	return b
}

// execParsersAgree fails t unless the Go decoder and, in a build with the C
// tail, its parser accept and refuse body alike, with the same numbers,
// cwd and counts; it returns the Go decoder's answer.
func execParsersAgree(t *testing.T, body []byte) (*execRequest, error) {
	t.Helper()
	r, err := decodeExec(body)
	if !haveTail {
		return r, err
	}
	cr, argc, total, why := tailParseExec(body)
	if (why == "") != (err == nil) {
		t.Fatalf("the C tail says %q, the Go decoder %v, for %q", why, err, body)
	}
	if err == nil && (cr.ID != r.ID || cr.UID != r.UID || cr.GID != r.GID || cr.Cwd != r.Cwd || cr.Terminal != r.Terminal ||
		argc != len(r.Args) || total != len(r.Args)+len(r.Env)) {
		t.Fatalf("the C tail reads %+v with %d args of %d strings, the Go decoder %+v", cr, argc, total, r)
	}
	return r, err
}

// TestExecParsers: each exec body a launcher of this build never sends is
// refused by both inits' parsers alike, naming its field, before anything
// is allocated for its counts or forked.
func TestExecParsers(t *testing.T) {
	cases := map[string]struct {
		body  []byte
		field string // "" when accepted
	}{
		"ok":                {execBody(1, 1000, 1000, 2, 1, "/", "sh", "-c", "PATH=/bin"), ""},
		"empty arg":         {execBody(2, 0, 0, 2, 0, "/tmp", "sh", ""), ""},
		"terminal":          {execBodyFlags(3, 0, 0, 1, 0, execTerminal, "/", "sh"), ""},
		"unknown flag":      {execBodyFlags(3, 0, 0, 1, 0, 2, "/", "sh"), "exec.flags"},
		"short":             {[]byte{0, 0, 0, 1, 0, 0}, "(exec frame)"},
		"id 0":              {execBody(0, 0, 0, 1, 0, "/", "sh"), "exec.id"},
		"invalid uid":       {execBody(1, 1<<32-1, 0, 1, 0, "/", "sh"), "exec.uid"},
		"invalid gid":       {execBody(1, 0, 1<<32-1, 1, 0, "/", "sh"), "exec.uid"},
		"no args":           {execBody(1, 0, 0, 0, 1, "/", "PATH=/bin"), "exec.args"},
		"empty program":     {execBody(1, 0, 0, 1, 0, "/", ""), "exec.args"},
		"counts too big":    {execBody(1, 0, 0, 0xffffffff, 0xffffffff, "/", "sh"), "(exec frame)"},
		"no cwd":            {execBody(1, 0, 0, 1, 0), "(exec frame)"},
		"relative cwd":      {execBody(1, 0, 0, 1, 0, "tmp", "sh"), "exec.cwd"},
		"empty cwd":         {execBody(1, 0, 0, 1, 0, "", "sh"), "exec.cwd"},
		"unterminated":      {append(execBody(1, 0, 0, 1, 0, "/"), 's', 'h'), "(exec frame)"},
		"trailing bytes":    {append(execBody(1, 0, 0, 1, 0, "/", "sh"), 'x'), "(exec frame)"},
		"fewer than counts": {execBody(1, 0, 0, 3, 0, "/", "sh", "-c"), "(exec frame)"},
		"env count lies":    {execBody(1, 0, 0, 1, 2, "/", "sh", "A=b"), "(exec frame)"},
	}
	for name, c := range cases {
		r, err := execParsersAgree(t, c.body)
		if c.field == "" {
			if err != nil {
				t.Errorf("%s: refused: %v", name, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%s: accepted %+v", name, r)
			continue
		}
		if we := wireRefusal(t, err); we.Field != c.field {
			t.Errorf("%s: refused at %q, want %q", name, we.Field, c.field)
		}
	}
}

// TestEncodeExecRefuses: what the init would refuse is refused before it is
// sent, and an accepted request decodes to itself.
func TestEncodeExecRefuses(t *testing.T) {
	for name, r := range map[string]*execRequest{
		"id 0":         {Cwd: "/", Args: []string{"sh"}},
		"no args":      {ID: 1, Cwd: "/"},
		"relative cwd": {ID: 1, Cwd: "tmp", Args: []string{"sh"}},
		"NUL in arg":   {ID: 1, Cwd: "/", Args: []string{"sh", "a\x00b"}},
		"NUL in cwd":   {ID: 1, Cwd: "/a\x00", Args: []string{"sh"}},
		"invalid uid":  {ID: 1, Cwd: "/", Args: []string{"sh"}, UID: 1<<32 - 1},
		"too large":    {ID: 1, Cwd: "/", Args: []string{"sh", strings.Repeat("a", maxFrame)}},
	} {
		if _, err := encodeExec(r); err == nil {
			t.Errorf("%s: encoded", name)
		}
	}
	in := &execRequest{ID: 9, UID: 1, GID: 2, Cwd: "/w", Args: []string{"sh", "-c", ""}, Env: []string{"A=1"}}
	frame, err := encodeExec(in)
	if err != nil {
		t.Fatal(err)
	}
	if frame[0] != msgExecReq || int(binary.BigEndian.Uint32(frame[1:])) != len(frame)-5 {
		t.Fatalf("frame header %q", frame[:5])
	}
	out, err := decodeExec(frame[5:])
	if err != nil || out.ID != 9 || out.UID != 1 || out.GID != 2 || out.Cwd != "/w" || strings.Join(out.Args, ",") != "sh,-c," || strings.Join(out.Env, ",") != "A=1" {
		t.Fatalf("round trip: %+v %v", out, err)
	}
}

// FuzzWireExec fuzzes an exec body: what the Go decoder accepts names a
// program, has an absolute cwd and encodes back to the same bytes; in a
// build with the C tail its parser accepts and refuses exactly the same
// bodies, with the same numbers and counts.
func FuzzWireExec(f *testing.F) {
	for _, r := range []*execRequest{
		{ID: 1, UID: 1000, GID: 1000, Cwd: "/", Args: []string{"sh", "-c", "echo"}, Env: []string{"PATH=/bin"}},
		{ID: 1 << 31, Cwd: "/work", Args: []string{"/bin/true"}},
		{ID: 3, Cwd: "/", Args: []string{"sh", ""}, Env: []string{""}},
	} {
		frame, err := encodeExec(r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(frame[5:])
	}
	f.Add(execBody(1, 0, 0, 0, 0))
	f.Add(execBody(1, 0, 0, 1, 0, "/", ""))
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := execParsersAgree(t, body)
		if err != nil {
			wireRefusal(t, err)
			return
		}
		if r.ID == 0 || len(r.Args) == 0 || r.Args[0] == "" || !strings.HasPrefix(r.Cwd, "/") {
			t.Fatalf("accepted %+v", r)
		}
		frame, err := encodeExec(r)
		if err != nil {
			t.Fatalf("an accepted request does not encode: %v", err)
		}
		if !bytes.Equal(frame[5:], body) {
			t.Fatalf("round trip differs:\n%q\n%q", body, frame[5:])
		}
	})
}

// TestReadInitMsg: the launcher reads only the messages an init of this
// build sends, each whole, and refuses any other type.
func TestReadInitMsg(t *testing.T) {
	in := append(append(append([]byte{msgStarted}, execMsg(msgExecStarted, 7, 42)...), execMsg(msgExecExit, 7, 3<<8)...), msgExit, 0, 0, 0, 9)
	br := bytes.NewReader(in)
	full := func(b []byte) error { _, err := br.Read(b); return err }
	var got []initMsg
	for br.Len() > 0 {
		m, err := readInitMsg(br, full, nil)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, m)
	}
	if len(got) != 4 || got[0].typ != msgStarted || got[1].id != 7 || got[1].v != 42 || got[2].v != 3<<8 || got[3].typ != msgExit || got[3].v != 9 {
		t.Fatalf("read %+v", got)
	}
	if _, err := readInitMsg(bytes.NewReader([]byte{'?', 0}), full, nil); err == nil {
		t.Fatal("an unknown type was read")
	} else {
		wireRefusal(t, err)
	}
}
