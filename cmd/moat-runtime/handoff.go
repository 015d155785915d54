package main

import (
	"fmt"
	"net"
	"os"

	"github.com/moat-sandbox/moat/nsexec"
	"github.com/moat-sandbox/moat/nsexec/oci"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// create and the container's monitor (issue 29, D1). An engine learns a
// container's end only by reaping the pid it got (containerd's runc shim and
// conmon are child subreapers), so that pid must be the sandbox's init and
// its parent must exit: create spawns the sandbox itself (nsexec.Prepare
// WithHandover), and the long-lived monitor, a sibling, is handed what the
// container's life needs. The order, each step undone if a later one fails:
//
//	create:  the state directory (claims the ID); the monitor, started with
//	         one end of a socketpair (handoffFD) and waiting on it
//	create:  the cgroup leaf, named for the monitor (cgroups.WithLeafOwner);
//	         the sandbox; the pty; the control socket
//	create -> monitor: a handoff line, with the sync socket, the init's
//	         pidfd, the host id's lock, the control listener and the pty
//	monitor: adopts the sandbox, writes the state (created), answers ok
//	create:  runs the prestart and createRuntime hooks (hooks.go)
//	create:  writes --pid-file (the init's pid), says commit, exits; the
//	         init and the monitor are reparented to the engine's subreaper
//
// Until the commit the monitor undoes everything at the socket's EOF
// without one (create failed, or was killed): it ends the sandbox, deletes
// the leaf, removes the state directory. A create killed before the
// handoff leaves the init alone with its sync socket's other end closed,
// and it exits.

// handoffFD is the monitor's end of the socketpair.
const handoffFD = 3

// handoff is create's message to the monitor; its descriptors come with it
// in this order: the sync socket, the pidfd, the lease (Lease), the control
// listener, the pty's slave (Pty).
type handoff struct {
	ID          string            `json:"id"`
	Bundle      string            `json:"bundle"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Pid         int               `json:"pid"`
	HostID      nsexec.Identity   `json:"hostID"`
	Lease       bool              `json:"lease,omitempty"`
	Pty         bool              `json:"pty,omitempty"`
	// Leaf is the cgroup leaf's id, "" when there is none.
	Leaf string `json:"leaf,omitempty"`
	// CgroupsPath is config.json's linux.cgroupsPath when the container's
	// group is there, and CgroupMade the levels create made for it
	// (cgroups.Leaf.Made), which the monitor removes at the end.
	CgroupsPath string   `json:"cgroupsPath,omitempty"`
	CgroupMade  []string `json:"cgroupMade,omitempty"`
	// Args and Env are the process's; Cwd, UID and GID its working
	// directory and ids inside, as nsexec runs it (an exec's defaults).
	Args []string `json:"args"`
	Env  []string `json:"env"`
	Cwd  string   `json:"cwd"`
	UID  uint32   `json:"uid"`
	GID  uint32   `json:"gid"`
	// Process is config.json's process, which an exec's is checked
	// against (execproc.go).
	Process *specs.Process `json:"process,omitempty"`
	// Caps are the capabilities the container's process holds, the most
	// an exec's --cap may name (heldCaps).
	Caps []string `json:"caps,omitempty"`
}

// heldCaps are the capabilities the container's process holds, inside its
// user namespace: what its exec computes from the plan's sets (nsexec's
// Capabilities: uid 0 gets (bounding | inheritable) & permitted, another
// uid the ambient set, as raised), and so what an exec'd process, forked
// by the same init, gets too.
func heldCaps(plan *oci.Plan) []string {
	c := plan.Config.Caps
	if c == nil {
		return nil
	}
	set := c.Ambient & c.Permitted & c.Inheritable
	if plan.Config.UID == 0 {
		set = (c.Bounding | c.Inheritable) & c.Permitted
	}
	return nsexec.CapabilityNames(set)
}

// handoffReply is the monitor's answer to the handoff.
type handoffReply struct {
	OK    bool   `json:"ok,omitempty"`
	Error string `json:"error,omitempty"`
}

// handoffCommit is create's last word: the pid file is written.
type handoffCommit struct {
	Commit bool `json:"commit"`
}

// fdFiles splits the descriptors that came with a handoff.
func (h *handoff) split(files []*os.File) (*nsexec.Handover, *os.File, *os.File, error) {
	want := 3
	if h.Lease {
		want++
	}
	if h.Pty {
		want++
	}
	if len(files) != want {
		closeAll(files)
		return nil, nil, nil, fmt.Errorf("the handoff came with %d descriptors, want %d", len(files), want)
	}
	ho := &nsexec.Handover{Pid: h.Pid, HostID: h.HostID, Sync: files[0], PidFD: files[1]}
	i := 2
	if h.Lease {
		ho.Lease = files[i]
		i++
	}
	ln := files[i]
	var pty *os.File
	if h.Pty {
		pty = files[i+1]
	}
	return ho, ln, pty, nil
}

// handoffConn is the monitor's end of the socketpair as a connection.
func handoffConn(f *os.File) (*net.UnixConn, error) {
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("the handoff socket: %w", err)
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		c.Close()
		return nil, fmt.Errorf("the handoff socket is not a unix socket")
	}
	return uc, nil
}
