//go:build linux

package nsexec

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// sampleWire is a frame as Start sends it: every field set.
func sampleWire() *wire {
	return &wire{
		Config: &Config{
			Version: ConfigVersion, Rootfs: "/srv/root", Network: NetworkLoopback, UID: 1000, GID: 1000,
			Hostname: "moat", TmpSize: DefaultTmpSize, Workdir: "/tmp/moat-work",
			Mounts: []specs.Mount{
				{Source: "/opt/models", Destination: "/opt/models", Type: MountBind, Options: []string{"ro"}},
				{Destination: "/scratch", Type: MountTmpfs, Options: []string{"size=1m"}},
			},
			Rlimits:  []specs.POSIXRlimit{{Type: "RLIMIT_NOFILE", Hard: 1024, Soft: 1024}},
			Seccomp:  []byte{6, 0, 0, 0, 0, 0, 0xff, 0x7f},
			Args:     []string{"python3", "-c", "pass"},
			Env:      []string{"PATH=/usr/bin", "HOME=/work"},
			CgroupNS: true,
		},
		SetGroups: true, Trace: true, Tasks: 5,
		Sources: sourceIDs{Rootfs: &fileID{Dev: 1, Ino: 2}, Workdir: &fileID{Dev: 1, Ino: 3}, Mounts: []fileID{{Dev: 1, Ino: 4}, {}}},
	}
}

func frameBody(t testing.TB, w *wire) []byte {
	t.Helper()
	frame, err := encodeFrame(w)
	if err != nil {
		t.Fatal(err)
	}
	if n := binary.BigEndian.Uint32(frame); int(n) != len(frame)-4 {
		t.Fatalf("frame header says %d bytes, body has %d", n, len(frame)-4)
	}
	return frame[4:]
}

// wireRefusal fails t unless err is a *WireError naming a field, with the
// errno the child reports.
func wireRefusal(t *testing.T, err error) *WireError {
	t.Helper()
	var we *WireError
	if !errors.As(err, &we) || we.Field == "" || we.Reason == "" {
		t.Fatalf("refused with %T %v, want a *WireError naming the field", err, err)
	}
	if errnoOf(err) != unix.EINVAL && errnoOf(err) != unix.EPROTO {
		t.Fatalf("%v: errno %v, want EINVAL or EPROTO", err, errnoOf(err))
	}
	return we
}

// FuzzWireFrame fuzzes the config frame the sandbox init decodes: a frame
// is accepted only in a form that survives encoding again unchanged, with
// everything the child indexes consistent (a tool to run, one source inode
// per mount, a bounded task count, a hostname that is one line), and each
// of its mounts is then either planned or refused with a *ConfigError;
// anything else is refused with a *WireError naming the field.
func FuzzWireFrame(f *testing.F) {
	f.Add(frameBody(f, sampleWire()))
	deferred := sampleWire()
	deferred.Deferred, deferred.Config.Args = true, nil
	f.Add(frameBody(f, deferred))
	minimal := &wire{Config: &Config{Version: ConfigVersion, Args: []string{"/bin/true"}}}
	f.Add(frameBody(f, minimal))
	f.Fuzz(func(t *testing.T, body []byte) {
		w, err := decodeFrame(body)
		if err != nil {
			wireRefusal(t, err)
			return
		}
		c := w.Config
		if !w.Deferred && c.Args[0] == "" || len(w.Sources.Mounts) != len(c.Mounts) || w.Tasks < 0 || w.Tasks > maxTasks {
			t.Fatalf("accepted an inconsistent frame: %+v", w)
		}
		if strings.ContainsAny(c.Hostname, "\n\r") {
			t.Fatalf("accepted hostname %q", c.Hostname)
		}
		for i := range c.Mounts {
			if _, err := parseMount(fmt.Sprintf("mounts[%d]", i), &c.Mounts[i], c.TmpSize); err != nil {
				var ce *ConfigError
				if !errors.As(err, &ce) || !strings.HasPrefix(ce.Field, "mounts[") {
					t.Fatalf("mount %d refused with %T %v, want a *ConfigError naming it", i, err, err)
				}
			}
		}
		once := frameBody(t, w)
		again, err := decodeFrame(once)
		if err != nil {
			t.Fatalf("an accepted frame, encoded again, is refused: %v", err)
		}
		if twice := frameBody(t, again); !bytes.Equal(once, twice) {
			t.Fatalf("round trip differs:\n%s\n%s", once, twice)
		}
	})
}

// FuzzWireRequest fuzzes a deferred child's request body: what the Go
// decoder accepts names a tool and encodes back to the same bytes, and in a
// build with the C tail its parser accepts and refuses exactly the same
// bodies, with the same counts.
func FuzzWireRequest(f *testing.F) {
	for _, r := range []*request{
		{Args: []string{"python3", "-c", "pass"}, Env: []string{"PATH=/usr/bin"}},
		{Args: []string{"/bin/true"}},
		{Args: []string{"sh", ""}, Env: []string{""}},
	} {
		frame, err := encodeRequest(r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(frame[4:])
	}
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{0, 0, 0, 1, 0, 0, 0, 0, 'x'})
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := decodeRequest(body)
		if haveTail {
			argc, total, why := tailParse(body)
			if (why == "") != (err == nil) {
				t.Fatalf("the C tail says %q, the Go decoder %v", why, err)
			}
			if err == nil && (argc != len(r.Args) || total != len(r.Args)+len(r.Env)) {
				t.Fatalf("the C tail counts %d args of %d strings, the Go decoder %d of %d", argc, total, len(r.Args), len(r.Args)+len(r.Env))
			}
		}
		if err != nil {
			wireRefusal(t, err)
			return
		}
		if len(r.Args) == 0 || r.Args[0] == "" {
			t.Fatalf("accepted a request that names no tool: %+v", r)
		}
		frame, err := encodeRequest(r)
		if err != nil {
			t.Fatalf("an accepted request does not encode: %v", err)
		}
		if !bytes.Equal(frame[4:], body) {
			t.Fatalf("round trip differs:\n%q\n%q", body, frame[4:])
		}
	})
}

// TestWireRefusesHostileFrames: each frame a parent of this build never
// sends is refused, naming its field, before the child acts on it.
func TestWireRefusesHostileFrames(t *testing.T) {
	cases := map[string]struct {
		edit  func(w *wire)
		field string
	}{
		"no config":                 {func(w *wire) { w.Config = nil }, "config"},
		"other version":             {func(w *wire) { w.Config.Version = ConfigVersion + 1 }, "config.version"},
		"no tool":                   {func(w *wire) { w.Config.Args = nil }, "config.args"},
		"empty tool":                {func(w *wire) { w.Config.Args = []string{""} }, "config.args"},
		"network":                   {func(w *wire) { w.Config.Network = "host" }, "config.network"},
		"invalid uid":               {func(w *wire) { w.Config.UID = 1<<32 - 1 }, "config.uid"},
		"negative tmpfs":            {func(w *wire) { w.Config.TmpSize = -1 }, "config.tmpSize"},
		"umask beyond 0777":         {func(w *wire) { w.Config.Umask = new(uint32(0o1022)) }, "config.umask"},
		"tasks":                     {func(w *wire) { w.Tasks = 1 << 30 }, "tasks"},
		"negative tasks":            {func(w *wire) { w.Tasks = -1 }, "tasks"},
		"tail of a cold start":      {func(w *wire) { w.Tail = true }, "tail"},
		"egressTCP with namespaces": {func(w *wire) { w.Config.EgressTCP = 3128 }, "config.egressTCP"},
		"check of a cold start":     {func(w *wire) { w.Check = true }, "check"},
		"check of two names":        {func(w *wire) { w.Deferred, w.Check = true, true; w.Config.Args = []string{"a", "b"} }, "check"},
		"rootfs unchecked":          {func(w *wire) { w.Sources.Rootfs = nil }, "sources.rootfs"},
		"workdir unchecked":         {func(w *wire) { w.Sources.Workdir = nil }, "sources.workdir"},
		"a mount unchecked":         {func(w *wire) { w.Sources.Mounts = w.Sources.Mounts[:1] }, "sources.mounts"},
		"hosts line":                {func(w *wire) { w.Config.Hostname = "moat\n10.0.0.1 bank.example" }, "config.hostname"},
		"hostname too long":         {func(w *wire) { w.Config.Hostname = strings.Repeat("h", 65) }, "config.hostname"},
		"root propagation":          {func(w *wire) { w.Config.RootfsPropagation = "rrshared" }, "config.rootfsPropagation"},
		"device off /dev": {func(w *wire) {
			w.Config.Devices = []Device{{Path: "/etc/shadow", Source: "/dev/null", Type: "c", Major: 1, Minor: 3}}
		}, "config.devices[0].path"},
		"device over /dev/null": {func(w *wire) {
			w.Config.Devices = []Device{{Path: "/dev/null", Source: "/dev/kvm", Type: "c", Major: 10, Minor: 232}}
		}, "config.devices[0].path"},
		"device up and out": {func(w *wire) {
			w.Config.Devices = []Device{{Path: "/dev/../etc/passwd", Source: "/dev/null", Type: "c", Major: 1, Minor: 3}}
		}, "config.devices[0].path"},
		"a FIFO device": {func(w *wire) {
			w.Config.Devices = []Device{{Path: "/dev/p", Source: "/dev/null", Type: "p"}}
		}, "config.devices[0].type"},
	}
	for name, c := range cases {
		w := sampleWire()
		c.edit(w)
		_, err := decodeFrame(frameBody(t, w))
		if we := wireRefusal(t, err); we.Field != c.field {
			t.Errorf("%s: refused at %q, want %q", name, we.Field, c.field)
		}
	}
	for _, body := range []string{`{"config":`, `{"config":{"uid":"root"}}`, `[]`} {
		_, err := decodeFrame([]byte(body))
		wireRefusal(t, err)
	}
	if _, err := decodeFrame(frameBody(t, sampleWire())); err != nil {
		t.Fatalf("the sample frame is refused: %v", err)
	}
}

// TestNormalizeRefusesWhatTheInitWould: Start refuses, naming the field, the
// values the init's frame check refuses, before anything is cloned.
func TestNormalizeRefusesWhatTheInitWould(t *testing.T) {
	for field, cfg := range map[string]*Config{
		"hostname": {Args: []string{"/bin/true"}, Hostname: "moat\n10.0.0.1 bank.example"},
		"uid":      {Args: []string{"/bin/true"}, UID: 1<<32 - 1, GID: 1000},
		"umask":    {Args: []string{"/bin/true"}, Umask: new(uint32(0o4000))},
	} {
		_, err := normalize(cfg, false)
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Field != field {
			t.Errorf("%s: %v, want a *ConfigError naming %s", field, err, field)
		}
	}
}
