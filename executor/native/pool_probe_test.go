package native_test

import (
	"encoding/json"
	"errors"
	"github.com/moat-sandbox/moat/conformance/testenv"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// poolProbeName is the argv[0] base under which this test binary acts as
// the share-nothing probe tool inside a sandbox (see init below).
const poolProbeName = "moat-pool-probe"

// probeKey is the SysV IPC key the probe creates and looks for.
const probeKey = 0x4d4f4154 // "MOAT"

// init turns a copy of the test binary named poolProbeName into the probe
// tool; it runs before TestMain, and only in that copy.
func init() {
	if filepath.Base(os.Args[0]) != poolProbeName {
		return
	}
	in, _ := io.ReadAll(os.Stdin)
	var msg struct {
		Args struct {
			Mode string `json:"mode"`
			Hold int    `json:"holdMs"`
		} `json:"args"`
	}
	_ = json.Unmarshal(in, &msg)
	var out any
	if msg.Args.Mode == "leave" {
		out = probeLeave(time.Duration(msg.Args.Hold) * time.Millisecond)
	} else {
		out = probeLook()
	}
	b, _ := json.Marshal(out)
	os.Stdout.Write(b)
	os.Exit(0)
}

// probeLeave leaves behind everything a tool could try to hand to the next
// dispatch: files in /work, /tmp and /dev/shm, SysV shared memory, a message
// queue and a semaphore set, a listening abstract socket, a session keyring
// and a background process; it holds them for hold before exiting.
func probeLeave(hold time.Duration) map[string]string {
	res := map[string]string{}
	note := func(what string, err error) {
		if err != nil {
			res[what] = err.Error()
		} else {
			res[what] = "made"
		}
	}
	for _, p := range []string{"/work/left", "/tmp/left", "/dev/shm/left"} {
		note(p, os.WriteFile(p, []byte("secret"), 0o666))
	}
	_, err := unix.SysvShmGet(probeKey, 4096, unix.IPC_CREAT|0o666)
	note("shm", err)
	_, _, errno := unix.Syscall(unix.SYS_MSGGET, probeKey, unix.IPC_CREAT|0o666, 0)
	note("msg", errnoErr(errno))
	_, _, errno = unix.Syscall(unix.SYS_SEMGET, probeKey, 1, unix.IPC_CREAT|0o666)
	note("sem", errnoErr(errno))
	l, err := net.Listen("unix", "@"+poolProbeName)
	note("abstract", err)
	note("keyring", joinKeyring())
	p, err := os.StartProcess("/bin/sleep", []string{"sleep", "30"}, &os.ProcAttr{})
	note("process", err)
	if p != nil {
		res["processPid"] = strconv.Itoa(p.Pid)
	}
	time.Sleep(hold)
	if l != nil {
		l.Close()
	}
	return res
}

// probeLook reports whatever of probeLeave's it can find.
func probeLook() map[string]any {
	var found []string
	for _, p := range []string{"/work/left", "/tmp/left", "/dev/shm/left"} {
		if _, err := os.Stat(p); err == nil {
			found = append(found, p)
		}
	}
	if _, err := unix.SysvShmGet(probeKey, 0, 0); err == nil {
		found = append(found, "shm")
	}
	if _, _, errno := unix.Syscall(unix.SYS_MSGGET, probeKey, 0, 0); errno == 0 {
		found = append(found, "msg")
	}
	if _, _, errno := unix.Syscall(unix.SYS_SEMGET, probeKey, 0, 0); errno == 0 {
		found = append(found, "sem")
	}
	if c, err := net.Dial("unix", "@"+poolProbeName); err == nil {
		c.Close()
		found = append(found, "abstract")
	}
	entries, _ := os.ReadDir("/proc")
	var pids []string
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err == nil {
			pids = append(pids, e.Name())
		}
	}
	entries, _ = os.ReadDir("/work")
	return map[string]any{"found": found, "pids": pids, "self": os.Getpid(), "workEntries": len(entries),
		"keyring": errText(joinKeyring())}
}

// joinKeyring tries keyctl(KEYCTL_JOIN_SESSION_KEYRING, name): the default
// filter refuses keyctl, so this must fail.
func joinKeyring() error {
	name, _ := unix.BytePtrFromString(poolProbeName)
	_, _, errno := unix.Syscall(unix.SYS_KEYCTL, unix.KEYCTL_JOIN_SESSION_KEYRING, uintptr(unsafe.Pointer(name)), 0)
	return errnoErr(errno)
}

func errnoErr(e unix.Errno) error {
	if e == 0 {
		return nil
	}
	return e
}

func errText(err error) string {
	if err == nil {
		return "ok"
	}
	var errno unix.Errno
	if errors.As(err, &errno) {
		return unix.ErrnoName(errno)
	}
	return err.Error()
}

// probeBinary copies the test binary as poolProbeName into a 0755 dir.
func probeBinary(t *testing.T) string { return testenv.CopySelfT(t, poolProbeName) }
