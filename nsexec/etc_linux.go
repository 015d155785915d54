package nsexec

import (
	"strconv"

	"golang.org/x/sys/unix"
)

// populate lays out the tmpfs root of host mode in one pass: the mount
// points, the merged-/usr symlinks and the few /etc files a tool expects,
// written directly (no per-start file copies from the host).
func populate(root int, cfg *Config, links [][2]string) error {
	dirs := []string{"etc", "proc", "dev", "tmp"}
	if cfg.Sysfs {
		dirs = append(dirs, "sys")
	}
	for _, d := range dirs {
		if err := unix.Mkdirat(root, d, 0o755); err != nil {
			return stepErr(StepEtc, "/"+d, "mkdir", err)
		}
	}
	for _, l := range links {
		if err := unix.Symlinkat(l[1], root, l[0]); err != nil {
			return stepErr(StepEtc, "/"+l[0], "symlink", err)
		}
	}
	for _, f := range etcFiles(cfg) {
		if err := writeAt(root, f[0], f[1]); err != nil {
			return stepErr(StepEtc, "/"+f[0], "write", err)
		}
	}
	return nil
}

// etcFiles returns name and content of the generated /etc files.
func etcFiles(cfg *Config) [][2]string {
	uid, gid := strconv.FormatUint(uint64(cfg.UID), 10), strconv.FormatUint(uint64(cfg.GID), 10)
	passwd := "root:x:0:0:root:/root:/usr/sbin/nologin\n"
	group := "root:x:0:\n"
	if cfg.UID != 0 && cfg.UID != 65534 {
		passwd += "moat:x:" + uid + ":" + gid + ":moat sandbox:/work:/bin/sh\n"
	}
	if cfg.GID != 0 && cfg.GID != 65534 {
		group += "moat:x:" + gid + ":\n"
	}
	passwd += "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
	group += "nogroup:x:65534:\n"
	return [][2]string{
		{"etc/passwd", passwd},
		{"etc/group", group},
		{"etc/hosts", "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\t" + cfg.Hostname + "\n"},
		{"etc/hostname", cfg.Hostname + "\n"},
		{"etc/nsswitch.conf", "passwd: files\ngroup: files\nshadow: files\nhosts: files\nnetworks: files\nservices: files\nprotocols: files\n"},
	}
}

func writeAt(dir int, name, content string) error {
	fd, err := unix.Openat(dir, name, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o644)
	if err != nil {
		return err
	}
	werr := writeAll(fd, []byte(content))
	if err := unix.Close(fd); werr == nil {
		werr = err
	}
	return werr
}
