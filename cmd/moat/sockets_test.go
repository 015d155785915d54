package main

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRunWarnsOfBoundSockets is issue 13 item 9: a bind that holds a host
// unix socket (docker.sock, the D-Bus socket) is reachable from --net none.
// The tool here does connect to it; moat run must have said so, in one
// line per bind, whether the source is the socket or its directory. As
// root and as nobody.
func TestRunWarnsOfBoundSockets(t *testing.T) {
	bothIdentities(t)
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	sock := filepath.Join(dir, "agent.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	os.Chmod(sock, 0o777)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("host daemon\n"))
			c.Close()
		}
	}()
	plain := t.TempDir()
	os.Chmod(plain, 0o755)
	connect := `import socket, sys
s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); print(s.recv(64).decode().strip())`
	for _, c := range []struct{ name, bind, inside string }{
		{"directory holding a socket", dir + ":/h", "/h/agent.sock"},
		{"the socket itself", sock + ":/agent.sock", "/agent.sock"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := moat(t, "", "run", "--log-format", "human", "--net", "none", "--bind", c.bind, "--", "python3", "-c", connect, c.inside)
			if r.code != 0 || r.stdout != "host daemon\n" {
				t.Fatalf("exit %d, stdout %q, stderr %q (the bound socket should be reachable, as documented)", r.code, r.stdout, r.stderr)
			}
			var warnings []string
			for _, l := range strings.Split(r.stderr, "\n") {
				if strings.Contains(l, "unix socket") {
					warnings = append(warnings, l)
				}
			}
			if len(warnings) != 1 || !strings.HasPrefix(warnings[0], "moat run: warning:") || !strings.Contains(warnings[0], sock) {
				t.Fatalf("stderr %q: want one warning line naming %s", r.stderr, sock)
			}
		})
	}
	t.Run("no socket, no warning", func(t *testing.T) {
		r := moat(t, "", "run", "--log-format", "human", "--bind", plain+":/p", "--", "/bin/true")
		if r.code != 0 || strings.Contains(r.stderr, "unix socket") {
			t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
		}
	})
}

// Issue 28 item 3: --expose-argv binds what the command line names, a unix
// socket too, and a script's private directory whole, sockets in it too:
// it warns as --bind does. As root and as nobody.
func TestRunExposeArgvWarnsOfSockets(t *testing.T) {
	bothIdentities(t)
	listen := func(dir string) string {
		sock := filepath.Join(dir, "agent.sock")
		ln, err := net.Listen("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		return sock
	}
	shared := t.TempDir() // a lone socket in it is bound alone
	os.Chmod(shared, 0o1777)
	sock := listen(shared)
	dir := t.TempDir() // private: the script comes with it
	os.Chmod(dir, 0o755)
	inDir := listen(dir)
	script := filepath.Join(dir, "tool")
	os.WriteFile(script, []byte("#!/bin/sh\necho ran\n"), 0o755)
	plain := t.TempDir()
	os.Chmod(plain, 0o755)
	quiet := filepath.Join(plain, "tool")
	os.WriteFile(quiet, []byte("#!/bin/sh\necho ran\n"), 0o755)
	for _, c := range []struct {
		name string
		argv []string
		want string // in the one warning line
	}{
		{"the socket as an argument", []string{"/bin/sh", "-c", "test -S \"$0\" && echo ran", sock}, sock + " is a unix socket"},
		{"in the script's directory", []string{script}, "holds the unix socket " + inDir},
		{"no socket, no warning", []string{quiet}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := moat(t, "", append([]string{"run", "--log-format", "human", "--net", "none", "--expose-argv", "--"}, c.argv...)...)
			if r.code != 0 || r.stdout != "ran\n" {
				t.Fatalf("exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
			}
			var warnings []string
			for _, l := range strings.Split(r.stderr, "\n") {
				if strings.Contains(l, "unix socket") {
					warnings = append(warnings, l)
				}
			}
			if c.want == "" {
				if len(warnings) != 0 {
					t.Fatalf("stderr %q: want no warning", r.stderr)
				}
				return
			}
			if len(warnings) != 1 || !strings.HasPrefix(warnings[0], "moat run: warning: --expose-argv") || !strings.Contains(warnings[0], c.want) {
				t.Fatalf("stderr %q: want one --expose-argv warning with %q", r.stderr, c.want)
			}
		})
	}
}
