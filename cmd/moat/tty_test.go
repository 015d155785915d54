package main

import (
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// terminalAttack is run inside the sandbox by python3 with the caller's
// terminal as stdin: each request whose effect would outlive the run, then
// an ordinary raw mode (allowed, and undone by moat afterwards).
const terminalAttack = `
import fcntl, struct, tty, os
for name, req, arg in [("TIOCSETD", 0x5423, struct.pack("i", 27)), ("TIOCEXCL", 0x540C, 0),
                       ("TIOCCONS", 0x541D, 0), ("TIOCSSERIAL", 0x541F, bytes(128)),
                       ("TIOCSLCKTRMIOS", 0x5457, bytes(64)), ("KDSKBMODE", 0x4B45, 0)]:
    try:
        fcntl.ioctl(0, req, arg)
        print(name, "ok")
    except OSError as e:
        print(name, os.strerror(e.errno))
tty.setraw(0)
print("raw ok")
`

// TestRunTerminalStateDoesNotOutliveTheRun is issue 13 item 6: with a
// terminal passed through, a tool set the line discipline to N_NULL and the
// caller's session went silent. The requests are denied, the terminal's
// discipline, exclusive flag and termios are as before after the run. As
// root and as nobody.
func TestRunTerminalStateDoesNotOutliveTheRun(t *testing.T) {
	bothIdentities(t)
	ptmx := openFD(t, "/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY)
	if err := unix.IoctlSetPointerInt(int(ptmx.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(ptmx.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	pts := openFD(t, "/dev/pts/"+strconv.Itoa(n), unix.O_RDWR|unix.O_NOCTTY)
	fd := int(pts.Fd())
	before, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	r := moatFiles(t, pts, nil, nil, "run", "--", "python3", "-c", terminalAttack)
	if r.code != 0 {
		t.Fatalf("exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	for _, req := range []string{"TIOCSETD", "TIOCEXCL", "TIOCCONS", "TIOCSSERIAL", "TIOCSLCKTRMIOS", "KDSKBMODE"} {
		if !strings.Contains(r.stdout, req+" Operation not permitted\n") {
			t.Errorf("%s was not refused by the filter: %q", req, r.stdout)
		}
	}
	if !strings.Contains(r.stdout, "raw ok\n") {
		t.Errorf("ordinary termios changes must keep working: %q", r.stdout)
	}
	if ldisc, err := unix.IoctlGetInt(fd, unix.TIOCGETD); err != nil || ldisc != 0 {
		t.Errorf("line discipline after the run: %d (%v), want N_TTY (0)", ldisc, err)
	}
	if excl, err := unix.IoctlGetInt(fd, unix.TIOCGEXCL); err != nil || excl != 0 {
		t.Errorf("exclusive mode after the run: %d (%v), want off", excl, err)
	}
	after, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	if *after != *before {
		t.Errorf("termios after the run %+v, want the caller's %+v", *after, *before)
	}
}
