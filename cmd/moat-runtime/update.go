package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// update changes the limits of a live container's cgroup leaf, as runc
// update: from --resources FILE (or - for stdin: linux.resources JSON, as
// podman and containerd's shim send it), or from runc's flags. Only what
// moat enforces is applied (memory, pids, cpu quota, period and shares);
// anything else set is refused naming the field, and nothing is changed
// (cgroups.Leaf.Update). 0 leaves a limit as it is, -1 lifts it.
func (r *runtime) update(args []string) error {
	vals, _, pos, err := parseCommand(args, updateFlags, nil)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return errors.New("update wants exactly one container ID")
	}
	id := pos[0]
	res, err := updateResources(vals, os.Stdin)
	if err == nil {
		err = swapOff(res)
	}
	if err != nil {
		return fmt.Errorf("update container %s: %w", id, err)
	}
	_, err = r.leafOp(id, "update", ctlRequest{Op: "update", Resources: res})
	return err
}

// updateFlags are runc update's options.
var updateFlags = []string{"resources", "r", "memory", "memory-swap", "memory-reservation", "kernel-memory", "kernel-memory-tcp",
	"pids-limit", "cpu-quota", "cpu-period", "cpu-share", "cpu-rt-period", "cpu-rt-runtime", "cpu-burst", "cpu-idle",
	"cpuset-cpus", "cpuset-mems", "blkio-weight", "l3-cache-schema", "mem-bw-schema"}

// updateResources reads the resources of an update: the --resources file
// (stdin for -), strictly (a field that is not linux.resources' is a
// mistake to report, not to drop), or the flags, which runc does not let
// mix.
func updateResources(vals map[string]string, stdin io.Reader) (*specs.LinuxResources, error) {
	file, fromFile := vals["resources"]
	if f, ok := vals["r"]; ok {
		file, fromFile = f, true
	}
	if fromFile {
		if len(vals) > 1 {
			return nil, errors.New("--resources takes the whole change: give the limits in its JSON, not as flags beside it")
		}
		return readResources(file, stdin)
	}
	for _, k := range []string{"l3-cache-schema", "mem-bw-schema"} {
		if v := vals[k]; v != "" {
			return nil, fmt.Errorf("--%s: moat does not manage Intel RDT; moat enforces memory, pids, cpu, blockIO and hugepageLimits", k)
		}
	}
	res := &specs.LinuxResources{Memory: &specs.LinuxMemory{}, CPU: &specs.LinuxCPU{}, Pids: &specs.LinuxPids{}, BlockIO: &specs.LinuxBlockIO{}}
	for flag, dst := range map[string]**int64{"memory": &res.Memory.Limit, "memory-swap": &res.Memory.Swap,
		"memory-reservation": &res.Memory.Reservation, "kernel-memory": &res.Memory.Kernel, "kernel-memory-tcp": &res.Memory.KernelTCP} {
		if v, ok := vals[flag]; ok {
			n, err := ramBytes(v)
			if err != nil {
				return nil, fmt.Errorf("--%s %q: %w", flag, v, err)
			}
			*dst = &n
		}
	}
	for flag, dst := range map[string]**int64{"cpu-quota": &res.CPU.Quota, "cpu-rt-runtime": &res.CPU.RealtimeRuntime,
		"cpu-idle": &res.CPU.Idle, "pids-limit": &res.Pids.Limit} {
		if v, ok := vals[flag]; ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("--%s %q: want a whole number", flag, v)
			}
			*dst = &n
		}
	}
	for flag, dst := range map[string]**uint64{"cpu-period": &res.CPU.Period, "cpu-share": &res.CPU.Shares,
		"cpu-rt-period": &res.CPU.RealtimePeriod, "cpu-burst": &res.CPU.Burst} {
		if v, ok := vals[flag]; ok {
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("--%s %q: want a whole number of 0 or more", flag, v)
			}
			*dst = &n
		}
	}
	if v, ok := vals["blkio-weight"]; ok {
		n, err := strconv.ParseUint(v, 10, 16)
		if err != nil {
			return nil, fmt.Errorf("--blkio-weight %q: want 10 to 1000", v)
		}
		w := uint16(n)
		res.BlockIO.Weight = &w
	}
	res.CPU.Cpus, res.CPU.Mems = vals["cpuset-cpus"], vals["cpuset-mems"]
	return res, nil
}

// swapOff keeps swap off, as create does (oci's translate keeps only
// memory.limit: a limit that can spill into swap is not a limit on what
// the sandbox holds), so a new memory limit is memory and memory+swap
// alike; a swap below the memory limit is still a mistake to report.
func swapOff(res *specs.LinuxResources) error {
	m := res.Memory
	if m == nil || m.Swap == nil {
		return nil
	}
	if *m.Swap > 0 && m.Limit != nil && *m.Limit > 0 && *m.Swap < *m.Limit {
		return fmt.Errorf("memory.swap %d is below memory.limit %d: memory+swap must not be below memory", *m.Swap, *m.Limit)
	}
	if *m.Swap < -1 {
		return fmt.Errorf("memory.swap %d: want bytes, -1 or 0", *m.Swap)
	}
	m.Swap = nil
	return nil
}

// maxResources bounds a --resources document (a few hundred bytes in
// practice).
const maxResources = 1 << 20

func readResources(file string, stdin io.Reader) (*specs.LinuxResources, error) {
	in := stdin
	if file != "-" {
		f, err := os.Open(file)
		if err != nil {
			return nil, fmt.Errorf("--resources: %w", err)
		}
		defer f.Close()
		in = f
	}
	b, err := io.ReadAll(io.LimitReader(in, maxResources+1))
	if err != nil {
		return nil, fmt.Errorf("--resources %s: %w", file, err)
	}
	if len(b) > maxResources {
		return nil, fmt.Errorf("--resources %s: more than %d bytes", file, maxResources)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var res specs.LinuxResources
	if err := dec.Decode(&res); err != nil {
		return nil, fmt.Errorf("--resources %s: not linux.resources JSON: %w", file, err)
	}
	return &res, nil
}

// ramSize is a size as runc's flags take it (docker/go-units RAMInBytes):
// a number, a unit of k, m, g, t or p (binary), an optional i and b.
var ramSize = regexp.MustCompile(`^(\d+(?:\.\d+)?) ?([kKmMgGtTpP])?[iI]?[bB]?$`)

// ramBytes reads a size for --memory and its kin; -1 is no limit.
func ramBytes(s string) (int64, error) {
	if s == "-1" {
		return -1, nil
	}
	m := ramSize.FindStringSubmatch(s)
	if m == nil {
		return 0, errors.New("want bytes, or a size such as 512m or 2g, or -1 for no limit")
	}
	n, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return 0, err
	}
	shift := strings.Index("kmgtp", strings.ToLower(m[2])) + 1
	if m[2] == "" {
		shift = 0
	}
	v := n * float64(int64(1)<<(10*shift))
	if v >= 1<<63 {
		return 0, errors.New("too large")
	}
	return int64(v), nil
}
