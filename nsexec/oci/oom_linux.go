package oci

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// SetOOMScoreAdj sets process.oomScoreAdj on the sandbox's init at pid,
// before its process starts, which inherits it, as every process the
// container starts does. The runtime writes /proc/PID/oom_score_adj: the
// kernel lets anyone raise a score, but lowering it below the least value
// the process may set (oom_score_adj_min: what it inherited, or what a
// privileged writer last set) needs CAP_SYS_RESOURCE in the initial user
// namespace (fs/proc/base.c __set_oom_adj), which only the host side can
// hold; the sandbox never does. Such a value is refused, naming why, when
// the runtime lacks the capability (rootless, inside a rootless engine's
// user namespace, or root without it, as in a container: containerd's
// restrict_oom_score_adj keeps its requests at or above its own). pid must
// be the caller's own unreaped child, so that it cannot have been reused.
func SetOOMScoreAdj(pid int, v *int) error {
	if v == nil {
		return nil
	}
	f, err := os.OpenFile("/proc/"+strconv.Itoa(pid)+"/oom_score_adj", os.O_WRONLY|unix.O_CLOEXEC, 0)
	if err == nil {
		_, err = f.WriteString(strconv.Itoa(*v))
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if errors.Is(err, unix.EACCES) && !canLowerOOMScore() {
		own, _ := ownOOMScoreAdj()
		return &UnsupportedError{Field: "process.oomScoreAdj", Value: strconv.Itoa(*v),
			Reason: fmt.Sprintf("is below the least score this runtime's processes may take (its own is %d), and lowering a score needs CAP_SYS_RESOURCE in the initial user namespace, which this runtime lacks (rootless, or root without it); "+
				"ask a higher one (containerd: restrict_oom_score_adj = true; podman: --oom-score-adj)", own)}
	}
	if err != nil {
		return fmt.Errorf("process.oomScoreAdj %d: set it on the container's init (pid %d): %w", *v, pid, err)
	}
	return nil
}

func ownOOMScoreAdj() (int, error) {
	b, err := os.ReadFile("/proc/self/oom_score_adj")
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, errors.New("read /proc/self/oom_score_adj: " + err.Error())
	}
	return n, nil
}

// canLowerOOMScore says whether this process holds CAP_SYS_RESOURCE in the
// initial user namespace: effective, and its user namespace the initial
// one (uid_map maps all of it).
func canLowerOOMScore() bool {
	var hdr = unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if unix.Capget(&hdr, &data[0]) != nil {
		return false
	}
	if data[unix.CAP_SYS_RESOURCE/32].Effective&(1<<(unix.CAP_SYS_RESOURCE%32)) == 0 {
		return false
	}
	b, err := os.ReadFile("/proc/self/uid_map")
	if err != nil {
		return true // no user namespaces: the initial one
	}
	f := strings.Fields(string(b))
	return len(f) == 3 && f[0] == "0" && f[1] == "0" && f[2] == "4294967295"
}
