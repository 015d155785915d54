package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
)

// ps prints the container's processes as runc ps does: `--format json` a
// JSON array of their host pids (what containerd's shim reads for ctr
// task ps), the table (the default) the lines of the host's ps whose PID
// column is one of them, ps run with the arguments after the ID (-ef when
// there are none). Options come before the ID: what follows it is ps's.
func (r *runtime) ps(args []string) error {
	format := "table"
	p := flagParser{args: args}
	for p.next() {
		switch p.name {
		case "format", "f":
			v, err := p.value()
			if err != nil {
				return err
			}
			format = v
		default:
			return fmt.Errorf("unknown option --%s", p.name)
		}
	}
	if format != "table" && format != "json" {
		return fmt.Errorf("ps --format %q: use table or json", format)
	}
	rest := p.rest()
	if len(rest) == 0 {
		return errors.New("ps wants a container ID")
	}
	id, psArgs := rest[0], rest[1:]
	if len(psArgs) > 0 && psArgs[0] == "--" {
		psArgs = psArgs[1:]
	}
	pids, err := r.containerPids(id)
	if err != nil {
		return err
	}
	if format == "json" {
		return json.NewEncoder(os.Stdout).Encode(pids)
	}
	if len(psArgs) == 0 {
		psArgs = []string{"-ef"}
	}
	out, err := exec.Command("ps", psArgs...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ps %s: %w: %s", strings.Join(psArgs, " "), err, out)
	}
	table, err := psFilter(string(out), pids)
	if err != nil {
		return fmt.Errorf("ps %s: %w", strings.Join(psArgs, " "), err)
	}
	fmt.Print(table)
	return nil
}

// containerPids asks the monitor of a live container for its pids.
func (r *runtime) containerPids(id string) ([]int, error) {
	rep, err := r.leafOp(id, "ps", ctlRequest{Op: "ps"})
	if err != nil {
		return nil, err
	}
	if rep.Pids == nil {
		return []int{}, nil // runc prints [], not null
	}
	return rep.Pids, nil
}

// psFilter keeps ps's header and the lines whose PID column is in pids.
func psFilter(out string, pids []int) (string, error) {
	lines := strings.Split(out, "\n")
	col := slices.Index(strings.Fields(lines[0]), "PID")
	if col < 0 {
		return "", errors.New("no PID column in its output (add -o pid,...)")
	}
	var b strings.Builder
	b.WriteString(lines[0] + "\n")
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		if len(f) <= col {
			continue
		}
		p, err := strconv.Atoi(f[col])
		if err != nil {
			return "", fmt.Errorf("a PID column that is not a number: %q", l)
		}
		if slices.Contains(pids, p) {
			b.WriteString(l + "\n")
		}
	}
	return b.String(), nil
}

// leafOp sends req to the monitor of live container id, which it reaches
// through the container's validated state directory (oci.Root.Open); the
// control socket must be a socket there, not a link to another's. What
// fails is prefixed with "cmd container id".
func (r *runtime) leafOp(id, cmd string, req ctlRequest) (*ctlReply, error) {
	d, err := r.open(id)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	_, alive, err := current(d)
	if err != nil {
		return nil, err
	}
	if !alive {
		return nil, fmt.Errorf("%s container %s: %w", cmd, id, errNotRunning)
	}
	fi, err := os.Lstat(d.At(controlSocket))
	if err != nil || fi.Mode().Type() != os.ModeSocket {
		return nil, fmt.Errorf("%s container %s: its control socket is not a socket in its state directory (%v): the state was tampered with", cmd, id, err)
	}
	rep, err := ask(d.At(controlSocket), req)
	if err != nil {
		return nil, fmt.Errorf("%s container %s: %w", cmd, id, err)
	}
	return rep, nil
}
