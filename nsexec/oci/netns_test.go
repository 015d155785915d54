package oci

import (
	"errors"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/conformance/testenv"
)

// TestCheckNetNSRefusesTheHosts: a config naming the host's network
// namespace (the runtime's own, or pid 1's through /proc) is refused; a
// namespace of its own, as an engine makes, passes.
func TestCheckNetNSRefusesTheHosts(t *testing.T) {
	testenv.RequireRoot(t)
	for _, p := range []string{"/proc/self/ns/net", "/proc/1/ns/net", "/proc/" + strconv.Itoa(os.Getpid()) + "/ns/net"} {
		f, err := os.Open(p)
		if errors.Is(err, os.ErrPermission) && p == "/proc/1/ns/net" {
			continue // pid 1 out of ptrace's reach (this host's, as root too): no config can name it either
		}
		if err != nil {
			t.Fatal(err)
		}
		var ue *UnsupportedError
		if err := CheckNetNS(f); !errors.As(err, &ue) {
			t.Errorf("CheckNetNS(%s) = %v, want the host's namespace refused", p, err)
		}
		f.Close()
	}
	cmd := exec.Command("unshare", "--net", "sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	// unshare has exec'd sleep once its namespace differs from ours.
	for i := 0; i < 200; i++ {
		own, _ := os.Readlink("/proc/self/ns/net")
		if l, _ := os.Readlink("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/ns/net"); l != "" && l != own {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	f, err := os.Open("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := CheckNetNS(f); err != nil {
		t.Errorf("a namespace of its own refused: %v", err)
	}
}
