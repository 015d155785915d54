package main

import (
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/conformance/testenv"
)

// The hostile tests of issue 28 item 7 for the files moat-runtime writes
// or connects to as the engine's caller (root): --pid-file, --log and
// --console-socket. Each is given through a link another user could have
// planted (in a directory anyone may write, and owned by nobody), and the
// target must get nothing.

// plantedDir is a directory of the planter's and a link to it that root
// must not follow.
func plantedDir(t *testing.T) (target, link string) {
	t.Helper()
	testenv.RequireRoot(t)
	target = t.TempDir()
	shared := filepath.Join(t.TempDir(), "shared")
	os.Mkdir(shared, 0o777)
	os.Chmod(shared, 0o777)
	link = filepath.Join(shared, "dir")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	os.Lchown(link, testenv.NobodyUID, testenv.NobodyGID)
	return target, link
}

func wantEmpty(t *testing.T, dir string) {
	t.Helper()
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("written through a planted link: %v", ents)
	}
}

func TestPidFileNotWrittenThroughAPlantedLink(t *testing.T) {
	target, link := plantedDir(t)
	if err := writePidFile(filepath.Join(link, "pid"), 42); err == nil {
		t.Fatal("the pid file was written through a planted link")
	}
	wantEmpty(t, target)
	// The caller's own path works, the pid renamed over a link there
	// rather than written through it.
	mine := t.TempDir()
	os.Symlink(filepath.Join(target, "victim"), filepath.Join(mine, "pid"))
	if err := writePidFile(filepath.Join(mine, "pid"), 42); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(mine, "pid")); err != nil || string(b) != "42" {
		t.Fatalf("pid file: %q %v", b, err)
	}
	wantEmpty(t, target)
}

func TestLogNotOpenedThroughAPlantedLink(t *testing.T) {
	target, link := plantedDir(t)
	l := openLog(global{logPath: filepath.Join(link, "log.json"), logFormat: "json"})
	if l.file != nil {
		l.file.Close()
		t.Fatal("the log was opened through a planted link")
	}
	wantEmpty(t, target)
}

func TestConsoleSocketNotDialedThroughAPlantedLink(t *testing.T) {
	target, link := plantedDir(t)
	ln, err := net.Listen("unix", filepath.Join(target, "sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if slave, err := sendConsole(filepath.Join(link, "sock"), nil); err == nil {
		slave.Close()
		t.Fatal("the pty went to a socket through a planted link")
	}
	// A connect would be in the backlog by now; accept it if it is there.
	ln.(*net.UnixListener).SetDeadline(time.Now().Add(100 * time.Millisecond))
	if c, err := ln.Accept(); err == nil {
		c.Close()
		t.Fatal("connected to a socket through a planted link")
	}
	// The engine's own socket, in its own directory, works.
	mine := filepath.Join(t.TempDir(), "console.sock")
	own, err := net.Listen("unix", mine)
	if err != nil {
		t.Fatal(err)
	}
	defer own.Close()
	got := make(chan error, 1)
	go func() {
		// Read the pty's message before closing: a close that wins the
		// race with the send makes the sender's sendmsg fail with EPIPE.
		c, err := own.Accept()
		if err == nil {
			buf, oob := make([]byte, 64), make([]byte, 64)
			_, _, _, _, err = c.(*net.UnixConn).ReadMsgUnix(buf, oob)
			c.Close()
		}
		got <- err
	}()
	slave, err := sendConsole(mine, nil)
	if err != nil {
		t.Fatalf("the engine's own socket: %v", err)
	}
	slave.Close()
	if err := <-got; err != nil {
		t.Fatal(err)
	}
}
