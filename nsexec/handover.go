package nsexec

import "os"

// Handover is a prepared sandbox (Prepare WithHandover) on its way from the
// process that spawned it to another that will hold it (Adopt):
// moat-runtime's create spawns the container's sandbox, so that the init is
// its child and becomes the engine's subreaper's once create exits, and
// hands it to the container's monitor, which outlives create. The files
// travel as inherited descriptors or SCM_RIGHTS; the numbers beside them.
type Handover struct {
	// Pid is the init's host pid.
	Pid int
	// HostID is the host uid and gid the sandbox's ids map to.
	HostID Identity
	// Sync is the launcher's end of the sync socket. The sandbox lives as
	// long as one process holds it: the spawning process closes its copy
	// once the adopter has one.
	Sync *os.File
	// PidFD is a pidfd of the init (from its clone, so it names that very
	// process), for signals that never hit a recycled pid.
	PidFD *os.File
	// Lease holds the sandbox's host id from the range (hostid_linux.go):
	// the id stays the sandbox's while any copy is open. Nil when the id
	// is not from the range (rootless, WithIdentity).
	Lease *os.File
}

// Files are the handover's descriptors in order: Sync, PidFD, then Lease if
// there is one.
func (h *Handover) Files() []*os.File {
	f := []*os.File{h.Sync, h.PidFD}
	if h.Lease != nil {
		f = append(f, h.Lease)
	}
	return f
}

// Close closes this process's copies of the descriptors.
func (h *Handover) Close() {
	for _, f := range h.Files() {
		if f != nil {
			f.Close()
		}
	}
}

// ExecSpec is a process to start in a running sandbox beside its tool
// (Adopted.Exec): what it runs, as the tool's Args and Env are, its working
// directory inside (absolute), and its uid and gid inside, which must be
// the tool's: the init holds no capability to switch to others.
type ExecSpec struct {
	Args     []string
	Env      []string
	Cwd      string
	UID, GID uint32
	// Terminal: stdin is a terminal that becomes the process's
	// controlling terminal, in the session of its own it gets anyway
	// (Config.Terminal says how), as runc exec --tty gives it.
	Terminal bool
}
