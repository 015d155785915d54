//go:build linux

package nsexec

import (
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

func init() {
	probes["caps"] = probeCaps
	probes["fds"] = probeFDs
	probes["exe"] = probeExe
	probes["mkdir"] = probeMkdir
	probes["net"] = probeNet
}

// probeCaps checks that the tool holds nothing and cannot regain anything.
func probeCaps() error {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return err
	}
	want := map[string]string{
		"CapInh": "0000000000000000", "CapPrm": "0000000000000000", "CapEff": "0000000000000000",
		"CapBnd": "0000000000000000", "CapAmb": "0000000000000000", "NoNewPrivs": "1",
	}
	for _, line := range strings.Split(string(status), "\n") {
		k, v, _ := strings.Cut(line, ":")
		if w, ok := want[k]; ok {
			if strings.TrimSpace(v) != w {
				return fmt.Errorf("%s is %s, want %s", k, strings.TrimSpace(v), w)
			}
			delete(want, k)
		}
	}
	if len(want) != 0 {
		return fmt.Errorf("missing from /proc/self/status: %v", want)
	}
	bits, err := unix.PrctlRetInt(unix.PR_GET_SECUREBITS, 0, 0, 0, 0)
	if err != nil || bits != lockedSecurebits {
		return fmt.Errorf("securebits %#x (%v), want %#x", bits, err, lockedSecurebits)
	}
	if err := unix.Unshare(unix.CLONE_NEWNS); err != unix.EPERM {
		return fmt.Errorf("unshare(CLONE_NEWNS) = %v, want EPERM", err)
	}
	fmt.Println("ok")
	return nil
}

// probeFDs prints the descriptors open in the tool, without the one used to
// list them (raw syscalls: the Go runtime's poller would add its own).
func probeFDs() error {
	fd, err := unix.Open("/proc/self/fd", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	buf := make([]byte, 4096)
	n, err := unix.Getdents(fd, buf)
	if err != nil {
		return err
	}
	_, _, names := unix.ParseDirent(buf[:n], -1, nil)
	names = slices.DeleteFunc(names, func(s string) bool { return s == strconv.Itoa(fd) })
	slices.Sort(names)
	fmt.Println(strings.Join(names, " "))
	return nil
}

// probeExe tries to open the executable of pid 1 for writing
// (CVE-2019-5736), directly and through an O_PATH reopen.
func probeExe() error {
	if fd, err := unix.Open("/proc/1/exe", unix.O_WRONLY, 0); err == nil {
		unix.Close(fd)
		return fmt.Errorf("/proc/1/exe opened for writing")
	}
	p, err := unix.Open("/proc/1/exe", unix.O_PATH, 0)
	if err == unix.EACCES {
		// The init is non-dumpable: not even a path handle of its binary.
		fmt.Println("ok")
		return nil
	}
	if err != nil {
		return err
	}
	if fd, err := unix.Open("/proc/self/fd/"+strconv.Itoa(p), unix.O_WRONLY, 0); err == nil {
		unix.Close(fd)
		return fmt.Errorf("/proc/1/exe reopened for writing")
	}
	fmt.Println("ok")
	return nil
}

// probeMkdir reports what mkdirat returns.
func probeMkdir() error {
	err := unix.Mkdirat(unix.AT_FDCWD, "/tmp/probe-dir", 0o755)
	fmt.Printf("mkdirat: %v\n", err)
	status, _ := os.ReadFile("/proc/self/status")
	for _, line := range strings.Split(string(status), "\n") {
		if strings.HasPrefix(line, "Seccomp:") {
			fmt.Println(strings.Join(strings.Fields(line), " "))
		}
	}
	return nil
}

// probeNet prints every interface as name:up or name:down.
func probeNet() error {
	ifs, err := net.Interfaces()
	if err != nil {
		return err
	}
	var out []string
	for _, i := range ifs {
		state := "down"
		if i.Flags&net.FlagUp != 0 {
			state = "up"
		}
		out = append(out, i.Name+":"+state)
	}
	fmt.Println(strings.Join(out, " "))
	return nil
}

// probeConfig runs probe name of the test binary inside a host-mode sandbox.
func probeConfig(t interface {
	Helper()
	Fatal(...any)
	TempDir() string
}, name string) *Config {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return &Config{
		Args:   []string{"/probe"},
		Env:    []string{probeVar + "=" + name},
		Mounts: []specs.Mount{{Source: self, Destination: "/probe", Options: []string{"ro"}}},
	}
}
