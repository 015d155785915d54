package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"

	"github.com/moat-sandbox/moat/cgroups"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// ps, pause, resume, events and update act on the container's cgroup leaf
// through its monitor, never by opening a cgroup path themselves:
//
//   - the monitor holds the leaf create made for it (sandbox.go openLeaf),
//     so where the leaf lives is its knowledge alone and no command line
//     or state file can point these commands at another group; a request
//     names no container, the monitor answers for its own;
//   - the monitor is the one writer of the container's state, and paused
//     is a state (oci.Dir.WriteState from two processes would race);
//   - the caller reaches the monitor only through the validated state
//     directory (oci.Root.Open: a checked ID, no symlink followed), and
//     the monitor answers only its own user or root (peerAllowed).

// statePaused is runc's status of a frozen container, which the OCI
// runtime spec does not name; engines read it from state (podman's
// "paused", containerd's PAUSED task).
const statePaused specs.ContainerState = "paused"

// errNotPaused is resume's error for a container that is not paused, in
// runc's words (libcontainer/error.go ErrNotPaused).
var errNotPaused = errors.New("container not paused")

// errNoLeaf is the error of a request that needs the container's cgroup
// leaf when it has none: moat makes one when the config asks for a
// memory, pids or cpu limit (sandbox.go cgroupFor).
var errNoLeaf = errors.New("the container has no cgroup of its own (moat makes one when config.json asks for a memory, pids or cpu limit in linux.resources; create it with one)")

// leafStats is the answer to "stats": what the leaf used, and its limits.
type leafStats struct {
	Usage    cgroups.Usage    `json:"usage"`
	Settings cgroups.Settings `json:"settings"`
}

// leafRequest answers ps, pause, resume, stats and update.
func (m *monitor) leafRequest(c *net.UnixConn, req ctlRequest) {
	if req.Op == "ps" {
		pids, err := m.pids()
		if err != nil {
			reply(c, err)
			return
		}
		writeLine(c, ctlReply{OK: true, Pids: pids})
		return
	}
	if m.leaf == nil {
		reply(c, errNoLeaf)
		return
	}
	switch req.Op {
	case "pause":
		reply(c, m.pause())
	case "resume":
		reply(c, m.resume())
	case "stats":
		u, err := m.leaf.Stats()
		if err != nil {
			reply(c, err)
			return
		}
		s, err := m.leaf.Settings()
		if err != nil {
			reply(c, err)
			return
		}
		writeLine(c, ctlReply{OK: true, Stats: &leafStats{Usage: u, Settings: s}})
	case "update":
		if req.Resources == nil {
			reply(c, errors.New("update: no resources given"))
			return
		}
		reply(c, m.leaf.Update(req.Resources))
	}
}

// pids are the container's processes, host pids as runc ps gives them:
// its leaf's, or without a leaf the init and its descendants (the init
// is its pid namespace's reaper, so every process of the container
// descends from it).
func (m *monitor) pids() ([]int, error) {
	if m.leaf != nil {
		return m.leaf.Pids()
	}
	return descendants(m.state.Pid)
}

// descendants is pid and every process below it, read from each task's
// children list (proc_pid_task(5), "children"; Linux >= 3.5 with
// CONFIG_PROC_CHILDREN).
func descendants(pid int) ([]int, error) {
	out := []int{pid}
	for i := 0; i < len(out); i++ {
		tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", out[i]))
		if err != nil {
			if i == 0 {
				return nil, fmt.Errorf("list the container's processes: %w", err)
			}
			continue // it ended meanwhile
		}
		for _, t := range tasks {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", out[i], t.Name()))
			if err != nil {
				continue
			}
			for _, f := range strings.Fields(string(b)) {
				if n, err := strconv.Atoi(f); err == nil {
					out = append(out, n)
				}
			}
		}
	}
	return out, nil
}

// pause freezes a created or running container, as runc does, and records
// it paused; anything else is runc's "container not running". A start in
// flight is not paused: its end would record the container running.
func (m *monitor) pause() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	st := m.state.Status
	if st != specs.StateRunning && st != specs.StateCreated {
		return errNotRunning
	}
	if m.started && st == specs.StateCreated {
		return errors.New("the container is starting: pause it once it runs")
	}
	if err := m.leaf.Freeze(); err != nil {
		return err
	}
	m.unpaused = st
	m.state.Status = statePaused
	if err := m.dir.WriteState(m.state); err != nil {
		m.leaf.Thaw()
		m.state.Status = st
		return err
	}
	return nil
}

// resume thaws a paused container and records the state it was paused in.
func (m *monitor) resume() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.state.Status != statePaused {
		return errNotPaused
	}
	if err := m.leaf.Thaw(); err != nil {
		return err
	}
	m.state.Status = m.unpaused
	return m.dir.WriteState(m.state)
}

// thawKilled thaws a paused container once SIGKILL is queued: a task of a
// frozen cgroup v1 leaf does not die until it is thawed (runc's
// signalInit does the same). The state stays paused until the end is
// recorded.
func (m *monitor) thawKilled() {
	m.mu.Lock()
	paused := m.state.Status == statePaused
	m.mu.Unlock()
	if paused && m.leaf != nil {
		if err := m.leaf.Thaw(); err != nil {
			m.log.Warn("thaw the killed container's cgroup", "err", err)
		}
	}
}
