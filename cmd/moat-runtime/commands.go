package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/moat-sandbox/moat/nsexec/oci"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// open finds container id under the root.
func (r *runtime) open(id string) (*oci.Dir, error) {
	root, err := oci.OpenRoot(r.global.root)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	return root.Open(id)
}

// current reads a container's state and says whether its init still runs
// (not a zombie); an init that is gone means stopped, whatever was
// recorded. The init dies with the monitor (its sync socket's end).
func current(d *oci.Dir) (*oci.State, bool, error) {
	st, err := d.ReadState()
	if err != nil {
		return nil, false, err
	}
	alive := oci.Alive(st.Pid, st.PidStart)
	if !alive {
		st.Status = specs.StateStopped
	}
	return st, alive, nil
}

func oneID(args []string, cmd string) (string, error) {
	_, _, pos, err := parseCommand(args, nil, nil)
	if err != nil {
		return "", err
	}
	if len(pos) != 1 {
		return "", fmt.Errorf("%s wants exactly one container ID", cmd)
	}
	return pos[0], nil
}

// one reads the one container ID of a command, and that container's state.
// The caller closes the Dir.
func (r *runtime) one(args []string, cmd string) (*oci.Dir, *oci.State, bool, error) {
	id, err := oneID(args, cmd)
	if err != nil {
		return nil, nil, false, err
	}
	d, err := r.open(id)
	if err != nil {
		return nil, nil, false, err
	}
	st, alive, err := current(d)
	if err != nil {
		d.Close()
		return nil, nil, false, err
	}
	return d, st, alive, nil
}

func (r *runtime) start(args []string) error {
	d, st, alive, err := r.one(args, "start")
	if err != nil {
		return err
	}
	defer d.Close()
	if !alive || st.Status != specs.StateCreated {
		return fmt.Errorf("start container %s: %w", st.ID, startRefusal(st.Status))
	}
	if err := request(d.At(controlSocket), ctlRequest{Op: "start"}); err != nil {
		return fmt.Errorf("start container %s: %w", st.ID, err)
	}
	return r.poststart(d, st) // hooks.go
}

// state prints the OCI state document.
func (r *runtime) state(args []string) error {
	d, st, _, err := r.one(args, "state")
	if err != nil {
		return err
	}
	d.Close()
	out := st.State
	if out.Status == specs.StateStopped {
		out.Pid = 0
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

func (r *runtime) kill(args []string) error {
	_, flags, pos, err := parseCommand(args, nil, []string{"all", "a"})
	if err != nil {
		return err
	}
	if len(pos) < 1 || len(pos) > 2 {
		return errors.New("kill wants a container ID and an optional signal")
	}
	sig := unix.SIGTERM
	if len(pos) == 2 {
		if sig, err = parseSignal(pos[1]); err != nil {
			return err
		}
	}
	d, err := r.open(pos[0])
	if err != nil {
		return err
	}
	defer d.Close()
	all := flags["all"] || flags["a"]
	st, alive, err := current(d)
	if err != nil {
		return err
	}
	if !alive {
		if all {
			return nil // runc: kill --all of a stopped container succeeds
		}
		return fmt.Errorf("kill container %s: %w", pos[0], errNotRunning)
	}
	err = request(d.At(controlSocket), ctlRequest{Op: "kill", Signal: int(sig), All: all})
	if errors.Is(err, errNotRunning) && all {
		return nil
	}
	if err != nil {
		return fmt.Errorf("kill container %s (%s): %w", pos[0], st.Status, err)
	}
	return nil
}

// parseSignal reads 9, KILL or SIGKILL.
func parseSignal(s string) (unix.Signal, error) {
	if n, err := strconv.Atoi(s); err == nil && n > 0 && n < 65 {
		return unix.Signal(n), nil
	}
	name := strings.ToUpper(s)
	if !strings.HasPrefix(name, "SIG") {
		name = "SIG" + name
	}
	if sig := unix.SignalNum(name); sig != 0 {
		return sig, nil
	}
	return 0, fmt.Errorf("unknown signal %q", s)
}

func (r *runtime) delete(args []string) error {
	_, flags, pos, err := parseCommand(args, nil, []string{"force", "f"})
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return errors.New("delete wants exactly one container ID")
	}
	id := pos[0]
	force := flags["force"] || flags["f"]
	d, err := r.open(id)
	if err != nil {
		if force && errors.Is(err, oci.ErrNotExist) {
			return nil
		}
		return err
	}
	st, alive, err := current(d)
	if err != nil && !errors.Is(err, oci.ErrNotExist) {
		d.Close()
		return err
	}
	if alive {
		if !force && st.Status != specs.StateStopped {
			// The runtime spec: delete of a container that is not stopped
			// fails and has no effect (runc ends a created one; engines
			// pass --force for that).
			d.Close()
			return deleteRefusal(id, st.Status)
		}
		request(d.At(controlSocket), ctlRequest{Op: "kill", Signal: int(unix.SIGKILL), All: true})
		if !waitGone(st.Pid, st.PidStart, 10*time.Second) {
			d.Close()
			return fmt.Errorf("delete container %s: its init (pid %d) did not end after SIGKILL", id, st.Pid)
		}
	}
	if st != nil && st.Monitor > 0 {
		// The monitor records the end and removes the cgroup leaf, then
		// exits: the state goes after it.
		waitGone(st.Monitor, st.MonitorStart, 10*time.Second)
	}
	orphan := st == nil || st.Exit == nil
	if orphan {
		// The monitor died without recording the end (killed; current
		// reads it as stopped, so the status cannot tell), or before it
		// wrote any state: the group at cgroupsPath create recorded, and
		// the levels it made, are left; they go now, before the record.
		if err := deleteOrphanCgroup(d, r.log.logger); err != nil {
			d.Close()
			return fmt.Errorf("delete container %s: %w", id, err)
		}
	}
	poststop := r.poststopLater(d, st) // hooks.go
	if err := d.Remove(); err != nil {
		return err
	}
	defer poststop()
	if orphan {
		// A cgroup leaf of moat's own (no cgroupsPath) is left too; moat
		// removes the leaves whose owner is gone, as every moat process
		// does at start.
		cleanStale()
	}
	return nil
}

// remove deletes a container's state, quietly (run's cleanup).
func (r *runtime) remove(id string) {
	if d, err := r.open(id); err == nil {
		st, _, _ := current(d)
		poststop := r.poststopLater(d, st) // hooks.go
		if d.Remove() == nil {
			poststop()
		}
	}
}

func waitGone(pid int, start uint64, limit time.Duration) bool {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if !oci.Alive(pid, start) {
			return true
		}
		time.Sleep(10 * time.Millisecond)
	}
	return false
}

// list prints runc list's table.
func (r *runtime) list(args []string) error {
	root, err := oci.OpenRoot(r.global.root)
	if err != nil {
		return err
	}
	defer root.Close()
	ids, err := root.List()
	if err != nil {
		return err
	}
	fmt.Println("ID\tPID\tSTATUS\tBUNDLE")
	for _, id := range ids {
		d, err := root.Open(id)
		if err != nil {
			continue
		}
		if st, _, err := current(d); err == nil {
			fmt.Printf("%s\t%d\t%s\t%s\n", id, st.Pid, st.Status, st.Bundle)
		}
		d.Close()
	}
	return nil
}
