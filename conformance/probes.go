package conformance

import (
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The isolation probes run inside the sandbox, as the runner program; each
// reports what it observed and the host side of the check judges it.
func init() {
	probes["probe-read"] = func(args map[string]json.RawMessage) any {
		var paths []string
		_ = json.Unmarshal(args["paths"], &paths)
		out := map[string]string{}
		for _, p := range paths {
			if _, err := os.ReadFile(p); err != nil {
				out[p] = errText(err)
			} else {
				out[p] = "readable"
			}
		}
		return out
	}
	probes["probe-write"] = func(args map[string]json.RawMessage) any {
		var paths []string
		_ = json.Unmarshal(args["paths"], &paths)
		out := map[string]string{}
		for _, p := range paths {
			// O_EXCL never clobbers an existing file, and what the probe
			// created is removed at once: on a provider that wrongly claims
			// isolation this runs on the host's real root.
			f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
			if err != nil {
				out[p] = errText(err)
				continue
			}
			f.Close()
			os.Remove(p)
			out[p] = "written"
		}
		return out
	}
	probes["probe-work"] = func(map[string]json.RawMessage) any {
		cwd, _ := os.Getwd()
		link, _ := os.Readlink("/proc/self/cwd")
		err := os.WriteFile("probe.txt", []byte("hi"), 0o644)
		back, _ := os.ReadFile("probe.txt")
		return map[string]any{"cwd": cwd, "procCwd": link, "write": errText(err), "readBack": string(back)}
	}
	probes["probe-net"] = func(args map[string]json.RawMessage) any {
		var tcp, abstract string
		_ = json.Unmarshal(args["tcp"], &tcp)
		_ = json.Unmarshal(args["abstract"], &abstract)
		// /proc/net/dev lists the namespace's interfaces without a netlink
		// socket, which a strict filter may refuse.
		var names []string
		if dev, err := os.ReadFile("/proc/net/dev"); err == nil {
			for _, line := range strings.Split(string(dev), "\n")[2:] {
				if name, _, ok := strings.Cut(line, ":"); ok {
					names = append(names, strings.TrimSpace(name))
				}
			}
		} else {
			// No procfs (mode no-proc): ask netlink.
			ifs, err := net.Interfaces()
			if err != nil {
				names = append(names, "netlink: "+errText(err))
			}
			for _, i := range ifs {
				names = append(names, i.Name)
			}
		}
		return map[string]any{
			"interfaces": names,
			// A UDP connect only looks the route up; no packet is sent. The
			// addresses are documentation ranges (RFC 5737, RFC 3849).
			"route4":   dialErr("udp4", "192.0.2.1:9"),
			"route6":   dialErr("udp6", "[2001:db8::1]:9"),
			"tcp":      dialErr("tcp", tcp),
			"abstract": dialErr("unix", "@"+abstract),
		}
	}
	probes["probe-pids"] = func(args map[string]json.RawMessage) any {
		var hostNS uint64
		_ = json.Unmarshal(args["hostPidNS"], &hostNS)
		entries, _ := os.ReadDir("/proc")
		var pids []map[string]string
		for _, e := range entries {
			if _, err := strconv.Atoi(e.Name()); err != nil {
				continue
			}
			comm, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "comm"))
			pids = append(pids, map[string]string{"pid": e.Name(), "comm": strings.TrimSpace(string(comm))})
		}
		// kill(-1) reaches every process the caller may signal but pid 1 of
		// its namespace and itself. It is only harmless, and only a
		// meaningful probe, in a pid namespace other than the host's (the
		// check passes the host's); anywhere else it would kill the caller's
		// whole session, so the probe refuses.
		killErr := errors.New("in the host's pid namespace; kill(-1) not attempted")
		var st syscall.Stat_t
		if err := syscall.Stat("/proc/self/ns/pid", &st); err == nil && hostNS != 0 && st.Ino != hostNS {
			killErr = syscall.Kill(-1, syscall.SIGKILL)
		}
		host, _ := os.Hostname()
		return map[string]any{"self": os.Getpid(), "parent": os.Getppid(), "pids": pids, "killAll": errText(killErr), "hostname": host}
	}
	probes["probe-privs"] = func(map[string]json.RawMessage) any {
		status, err := os.ReadFile("/proc/self/status")
		if err != nil {
			// No procfs (mode no-proc): the same fields by system call.
			return privsBySyscall()
		}
		out := map[string]string{}
		for _, line := range strings.Split(string(status), "\n") {
			k, v, ok := strings.Cut(line, ":")
			if ok && (strings.HasPrefix(k, "Cap") || k == "NoNewPrivs" || k == "Uid" || k == "Gid") {
				out[k] = strings.TrimSpace(v)
			}
		}
		for _, p := range []string{"/proc/self/exe", "/proc/1/exe"} {
			f, err := os.OpenFile(p, os.O_WRONLY, 0)
			if err == nil {
				f.Close()
				out["write "+p] = "opened"
			} else {
				out["write "+p] = errText(err)
			}
		}
		return out
	}
	probes["probe-stdio"] = func(map[string]json.RawMessage) any {
		out := map[string]any{}
		for fd := range 3 {
			var st unix.Stat_t
			kind := "unknown"
			if err := unix.Fstat(fd, &st); err != nil {
				kind = errText(err)
			} else {
				kind = map[uint32]string{unix.S_IFDIR: "directory", unix.S_IFLNK: "symlink", unix.S_IFREG: "file",
					unix.S_IFIFO: "fifo", unix.S_IFSOCK: "socket", unix.S_IFCHR: "chardev", unix.S_IFBLK: "blockdev", 0: "anonymous"}[st.Mode&unix.S_IFMT]
			}
			flags := ""
			if fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0); err == nil && fl&unix.O_PATH != 0 {
				flags = "O_PATH"
			}
			// Listing through the magic link is what a door would allow.
			_, err := os.ReadDir("/proc/self/fd/" + strconv.Itoa(fd) + "/")
			out[strconv.Itoa(fd)] = map[string]string{"type": kind, "flags": flags, "list": errText(err)}
		}
		return out
	}
	probes["probe-callerdir"] = func(args map[string]json.RawMessage) any {
		var dir string
		_ = json.Unmarshal(args["dir"], &dir)
		out := map[string]string{
			"chmod": errText(os.Chmod(dir, 0o777)),
			"chown": errText(os.Chown(dir, os.Getuid(), os.Getgid())),
		}
		// O_EXCL never clobbers; what the probe created is removed at once.
		f, err := os.OpenFile(filepath.Join(dir, "moat-probe-entry"), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err == nil {
			f.Close()
			os.Remove(f.Name())
		}
		out["create"] = errText(err)
		return out
	}
	probes["probe-fds"] = func(map[string]json.RawMessage) any {
		dir, err := os.Open("/proc/self/fd")
		if err != nil {
			return fdsBySyscall() // no procfs (mode no-proc)
		}
		defer dir.Close()
		names, _ := dir.Readdirnames(-1)
		fds := map[string]string{}
		cloexec := map[string]bool{}
		for _, n := range names {
			if n == strconv.Itoa(int(dir.Fd())) {
				continue // the descriptor doing the listing
			}
			target, _ := os.Readlink("/proc/self/fd/" + n)
			fds[n] = target
			if fd, err := strconv.Atoi(n); err == nil {
				fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
				cloexec[n] = err == nil && fl&unix.FD_CLOEXEC != 0
			}
		}
		return map[string]any{"fds": fds, "cloexec": cloexec}
	}
}

func dialErr(network, addr string) string {
	if addr == "" || addr == "@" {
		return "not asked"
	}
	c, err := net.DialTimeout(network, addr, 2*time.Second)
	if err != nil {
		return errText(err)
	}
	c.Close()
	return "connected"
}

// errText is an error's text for a probe report, "ok" for none.
func errText(err error) string {
	if err == nil {
		return "ok"
	}
	return err.Error()
}
