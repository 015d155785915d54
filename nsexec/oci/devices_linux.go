package oci

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"

	"github.com/moat-sandbox/moat/nsexec"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// moatDevNodes are the nodes moat's /dev has of its own (nsexec's
// dev_linux.go): a config's device there is met by moat's when it is the
// same device.
var moatDevNodes = []string{"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty"}

// devScanSkip are the directories of the host's /dev that hold no device
// a config names by number (pseudo-terminals, shared memory, queues).
var devScanSkip = []string{"/dev/pts", "/dev/shm", "/dev/mqueue", "/dev/hugepages", "/dev/fd"}

// devices takes linux.devices: each becomes a bind of the host's node of
// that type and number (nsexec.Device), with the host's owner and mode,
// which stay whatever fileMode, uid and gid the config asks (a note says
// so); a number no host node has is refused.
func (t *translator) devices(ds []specs.LinuxDevice) {
	for i, d := range ds {
		field := fmt.Sprintf("linux.devices[%d]", i)
		typ := d.Type
		if typ == "u" { // unbuffered character device: a character device
			typ = "c"
		}
		if typ != "c" && typ != "b" {
			t.refuse(field+".type", d.Type, `moat binds host character and block devices only ("c", "u" or "b")`)
			continue
		}
		if d.Major < 0 || d.Minor < 0 || d.Major > 1<<32-1 || d.Minor > 1<<32-1 {
			t.refuse(field, fmt.Sprintf("%d:%d", d.Major, d.Minor), "is not a device number")
			continue
		}
		path := filepath.Clean(d.Path)
		if !strings.HasPrefix(path, "/dev/") {
			t.refuse(field+".path", d.Path, "moat puts devices in its own /dev only; use a path below /dev")
			continue
		}
		maj, min := uint32(d.Major), uint32(d.Minor)
		src, err := hostDevice(path, typ, maj, min)
		if err != nil {
			t.refuse(field, fmt.Sprintf("%s %s %d:%d", d.Path, d.Type, d.Major, d.Minor), "%v", err)
			continue
		}
		if slices.Contains(moatDevNodes, path) {
			if src != path {
				t.refuse(field+".path", d.Path, "is one of moat's own /dev nodes, which is another device")
			}
			continue // moat's own node is this device
		}
		if d.FileMode != nil || d.UID != nil || d.GID != nil {
			t.note("%s %s: bound from the host's %s with its owner and mode (a user namespace cannot make a node that opens)", field, d.Path, src)
		}
		dev := nsexec.Device{Path: path, Source: src, Type: typ, Major: maj, Minor: min}
		var ce *nsexec.ConfigError
		if err := nsexec.CheckDevices(append(slices.Clone(t.plan.Config.Devices), dev)); errors.As(err, &ce) {
			t.refuse(field+".path", d.Path, "%s", ce.Reason)
			continue
		}
		t.plan.Config.Devices = append(t.plan.Config.Devices, dev)
	}
}

// hostDevice finds the host's node of that type and number: at path
// itself, else anywhere below /dev.
func hostDevice(path, typ string, maj, min uint32) (string, error) {
	want := unix.Mkdev(maj, min)
	mode := uint32(unix.S_IFCHR)
	if typ == "b" {
		mode = unix.S_IFBLK
	}
	is := func(p string) bool {
		var st unix.Stat_t
		return unix.Lstat(p, &st) == nil && st.Mode&unix.S_IFMT == mode && st.Rdev == want
	}
	if is(path) {
		return path, nil
	}
	found := ""
	filepath.WalkDir("/dev", func(p string, e fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return nil
		case e.IsDir() && slices.Contains(devScanSkip, p):
			return fs.SkipDir
		case e.Type()&(fs.ModeDevice|fs.ModeCharDevice) != 0 && is(p):
			found = p
			return fs.SkipAll
		}
		return nil
	})
	if found == "" {
		kind := "character"
		if typ == "b" {
			kind = "block"
		}
		return "", fmt.Errorf("the host has no %s device %d:%d below /dev to bind (a user namespace cannot make one)", kind, maj, min)
	}
	return found, nil
}
