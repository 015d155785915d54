package conformance

import (
	"context"
	"encoding/json"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"unsafe"

	"github.com/moat-sandbox/moat/ledger"
	"golang.org/x/sys/unix"
)

// A setuid or setgid file left in a workdir or a writable bind is a door
// for whoever runs it later, with the sandbox's host uid (issue 13, item
// 4). The probe tries every way a tool has to make one; the check walks the
// workdir while it still exists and fails on any file carrying either bit.
func init() {
	probes["probe-setuid"] = func(map[string]json.RawMessage) any {
		out := map[string]string{}
		create := func(name string) {
			os.WriteFile(name, []byte("#!/bin/sh\n"), 0o755)
		}
		for _, a := range []struct {
			name string
			mode uint32
		}{{"chmod-u", 0o4755}, {"chmod-g", 0o2755}, {"chmod-ug", 0o6755}} {
			create(a.name)
			out["chmod "+a.name] = errText(os.Chmod(a.name, os.FileMode(a.mode&0o777)|modeBits(a.mode)))
		}
		create("fchmod")
		if f, err := os.OpenFile("fchmod", os.O_RDWR, 0); err == nil {
			out["fchmod"] = errText(unix.Fchmod(int(f.Fd()), 0o4755))
			f.Close()
		}
		create("fchmodat")
		out["fchmodat"] = errText(unix.Fchmodat(unix.AT_FDCWD, "fchmodat", 0o2755, 0))
		create("fchmodat2")
		_, _, e := unix.Syscall6(unix.SYS_FCHMODAT2, atFDCWD, ptr("fchmodat2"), 0o4755, 0, 0, 0)
		out["fchmodat2"] = errText(errOf(e))
		fd, err := unix.Open("openat", unix.O_CREAT|unix.O_WRONLY|unix.O_CLOEXEC, 0o4755)
		if err == nil {
			unix.Close(fd)
		}
		out["openat O_CREAT"] = errText(err)
		out["mknodat S_IFREG"] = errText(unix.Mknodat(unix.AT_FDCWD, "mknodat", unix.S_IFREG|0o6755, 0))
		os.Mkdir("dir", 0o755)
		out["chmod dir g+s"] = errText(os.Chmod("dir", 0o755|os.ModeSetgid))
		// A file made in the directory would inherit its group's setgid
		// rules; with the directory refused, nothing inherits.
		os.WriteFile("dir/inner", nil, 0o755)
		// The ordinary tools: chmod(1), install(1), cp -p of a setuid file.
		for name, argv := range map[string][]string{
			"chmod u+s": {"chmod", "u+s", "chmod-u"},
			"chmod g+s": {"chmod", "g+s", "chmod-g"},
			"install":   {"install", "-m", "4755", "/bin/sh", "install"},
		} {
			out[name] = cmdText(exec.Command(hostTool(argv[0]), argv[1:]...).Run())
		}
		for _, src := range []string{"/usr/bin/passwd", "/usr/bin/su", "/bin/su", "/usr/bin/mount"} {
			if st, err := os.Stat(src); err == nil && st.Mode()&os.ModeSetuid != 0 {
				out["cp -p "+src] = cmdText(exec.Command(hostTool("cp"), "-p", src, "cp-p").Run())
				break
			}
		}
		return out
	}
}

// hostTool finds a coreutils program without PATH (the tool's environment
// has none).
func hostTool(name string) string {
	for _, dir := range []string{"/usr/bin", "/bin"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
			return filepath.Join(dir, name)
		}
	}
	return name
}

func modeBits(m uint32) os.FileMode {
	var fm os.FileMode
	if m&0o4000 != 0 {
		fm |= os.ModeSetuid
	}
	if m&0o2000 != 0 {
		fm |= os.ModeSetgid
	}
	return fm
}

func ptr(s string) uintptr {
	p, _ := unix.BytePtrFromString(s)
	return uintptr(unsafe.Pointer(p))
}

func errOf(e unix.Errno) error {
	if e == 0 {
		return nil
	}
	return e
}

func cmdText(err error) string {
	if err == nil {
		return "ok"
	}
	return err.Error()
}

func checkSetuid(k *kit) {
	l := &setuidLedger{}
	var got map[string]string
	k.probe(Config{Ledger: l}, "probe-setuid", nil, &got)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		k.fatalf("walk the workdir the tool wrote: %v", l.err)
	}
	if len(l.found) > 0 {
		k.fatalf("the tool left files with setuid or setgid bits: %v (attempts: %v)", l.found, got)
	}
	if l.files < 8 {
		k.fatalf("the tool left %d files; the probe did not run its attempts (%v)", l.files, got)
	}
}

// setuidLedger walks the workdir when the outcome row comes (the workdir
// still exists then) and lists every file with S_ISUID or S_ISGID.
type setuidLedger struct {
	mu    sync.Mutex
	found []string
	files int
	err   error
}

func (l *setuidLedger) Record(_ context.Context, r ledger.Record) error {
	if r.Workdir == "" {
		return nil
	}
	var found []string
	files := 0
	err := filepath.WalkDir(r.Workdir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(path, &st); err != nil {
			return err
		}
		files++
		if st.Mode&(unix.S_ISUID|unix.S_ISGID) != 0 {
			rel, _ := filepath.Rel(r.Workdir, path)
			found = append(found, rel)
		}
		return nil
	})
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil && l.files > 0 {
		return nil // an earlier row saw the workdir whole
	}
	l.found, l.files, l.err = found, files, err
	return nil
}

// atFDCWD is AT_FDCWD (-100) as a raw syscall argument.
var atFDCWD = func() uintptr { fd := unix.AT_FDCWD; return uintptr(fd) }()
