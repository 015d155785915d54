package cgroups

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"

	sd "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// The systemd cgroup driver: an OCI linux.cgroupsPath of the form
// "slice:prefix:name" (runc --systemd-cgroup, podman --cgroup-manager
// systemd, containerd SystemdCgroup = true, kubelet's systemd driver) names
// a transient scope, prefix-name.scope, in that slice. The system manager
// creates it holding the container's init, with Delegate=yes (the
// container's group is the runtime's to write, systemd.resource-control(5)
// "Delegate="), as runc's systemd driver asks (libcontainer/cgroups/
// systemd); the limits are then written in the scope's group, as runc
// writes them after the unit's properties. systemd removes the scope once
// its last process has exited (CollectMode=inactive-or-failed), so
// nothing of it is moat's to remove.

// SystemBus is the system manager's D-Bus socket (systemd(1),
// dbus-daemon(1)'s default system bus address).
const SystemBus = "unix:path=/run/dbus/system_bus_socket"

// SystemdBooted reports whether systemd is this host's init, as
// sd_booted(3) tells: /run/systemd/system exists.
func SystemdBooted() bool {
	fi, err := os.Lstat("/run/systemd/system")
	return err == nil && fi.IsDir()
}

// ScopeOf is where systemd puts the scope of a "slice:prefix:name"
// cgroupsPath: the scope's unit name and its group's absolute path (a
// slice a-b.slice is the group /a.slice/a-b.slice, systemd.slice(5)). An
// empty slice is system.slice, as in runc; a name ending in .scope is the
// unit's whole name.
func ScopeOf(path string) (unit, group string, err error) {
	f := strings.Split(path, ":")
	if len(f) != 3 || f[2] == "" {
		return "", "", &PathError{Path: path, Reason: "is not of the systemd driver's form slice:prefix:name (--systemd-cgroup)"}
	}
	slice, prefix, name := f[0], f[1], f[2]
	if slice == "" {
		slice = "system.slice"
	}
	unit = name
	if !strings.HasSuffix(name, ".scope") {
		unit = name + ".scope"
		if prefix != "" {
			unit = prefix + "-" + unit
		}
	}
	if !validUnitPart(unit) || !strings.HasSuffix(slice, ".slice") || !validUnitPart(slice) {
		return "", "", &PathError{Path: path, Reason: "names a unit or slice systemd would not take (letters, digits and :_.\\- only, a slice ending in .slice)"}
	}
	group = "/"
	if slice != "-.slice" {
		base := strings.TrimSuffix(slice, ".slice")
		if strings.HasPrefix(base, "-") || strings.HasSuffix(base, "-") || strings.Contains(base, "--") {
			return "", "", &PathError{Path: path, Reason: "names an invalid slice " + slice}
		}
		parts := strings.Split(base, "-")
		for i := range parts {
			group += strings.Join(parts[:i+1], "-") + ".slice/"
		}
	}
	group += unit
	if err := CheckPath(group); err != nil {
		return "", "", err
	}
	return unit, group, nil
}

func validUnitPart(s string) bool {
	if s == "" || len(s) > 255 || s == "." || s == ".." {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune(":_.\\-", r)) {
			return false
		}
	}
	return true
}

// StartScope asks the system manager at address (SystemBus) for the
// transient scope path names (ScopeOf) holding pid, then writes the
// limits of res in its group and returns it as a Leaf (OpenPath(group,
// nil) opens it again elsewhere); its Delete kills what runs there and
// leaves the scope to systemd. A unit of that name that exists already is
// refused by systemd (the job fails), so no one else's group is taken.
// WithHost and WithLogger apply.
func StartScope(address, path string, pid int, res *specs.LinuxResources, opts ...Option) (*Leaf, error) {
	unit, group, err := ScopeOf(path)
	if err != nil {
		return nil, err
	}
	lim, err := limitsFrom(res)
	if err != nil {
		return nil, err
	}
	if err := refuseExtras(res); err != nil {
		return nil, err
	}
	var c config
	for _, o := range opts {
		o(&c)
	}
	log := c.log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	slice := strings.TrimSuffix(group[:strings.LastIndex(group, "/")+1], "/")
	slice = slice[strings.LastIndex(slice, "/")+1:]
	if slice == "" {
		slice = "-.slice"
	}
	ctx, cancel := context.WithTimeout(context.Background(), busTimeout)
	defer cancel()
	conn, err := dialUserBus(ctx, address)
	if err != nil {
		return nil, fmt.Errorf("start scope %s: connect to the system manager at %s: %w", unit, address, err)
	}
	defer conn.Close()
	props := []sd.Property{
		sd.PropDescription("moat-runtime container " + unit),
		sd.PropSlice(slice),
		sd.PropPids(uint32(pid)),
		{Name: "Delegate", Value: dbus.MakeVariant(true)},
		{Name: "DefaultDependencies", Value: dbus.MakeVariant(false)},
		{Name: "CollectMode", Value: dbus.MakeVariant("inactive-or-failed")},
		{Name: "MemoryAccounting", Value: dbus.MakeVariant(true)},
		{Name: "TasksAccounting", Value: dbus.MakeVariant(true)},
		{Name: "CPUAccounting", Value: dbus.MakeVariant(true)},
	}
	if lim.pids > 0 {
		props = append(props, sd.Property{Name: "TasksMax", Value: dbus.MakeVariant(uint64(lim.pids))})
	}
	done := make(chan string, 1)
	if _, err := conn.StartTransientUnitContext(ctx, unit, "fail", props, done); err != nil {
		return nil, fmt.Errorf("start scope %s in %s: %w", unit, slice, err)
	}
	select {
	case r := <-done:
		if r != "done" {
			return nil, fmt.Errorf("start scope %s in %s: job %s (a unit of that name exists, or the slice is refused)", unit, slice, r)
		}
	case <-ctx.Done():
		return nil, fmt.Errorf("start scope %s: %w", unit, ctx.Err())
	}
	made, err := joinUnmanaged(group, pid, c.host)
	var l *Leaf
	if err == nil {
		l, err = OpenPath(group, made, opts...)
	}
	if err == nil {
		err = l.setLimits(lim)
	}
	if err != nil {
		removePathDirs(made, made)
	}
	if err != nil {
		stop := make(chan string, 1)
		if _, serr := conn.StopUnitContext(ctx, unit, "replace", stop); serr == nil {
			<-stop
		}
		return nil, fmt.Errorf("start scope %s: %w", unit, err)
	}
	log.Debug("container in a transient systemd scope with Delegate=yes", "scope", unit, "group", group)
	return l, nil
}

// setLimits writes lim in a leaf's groups (StartScope's).
func (l *Leaf) setLimits(lim limits) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch o := l.ops.(type) {
	case *v1Leaf:
		memsw := o.ctl["memory"] != "" && exists(o.ctl["memory"]+"/memory.memsw.limit_in_bytes")
		return o.set(lim, memsw)
	case *v2Leaf:
		on, err := fields(o.dir, "cgroup.controllers")
		if err != nil {
			return err
		}
		return o.set(lim, on)
	}
	return nil
}

// joinUnmanaged puts pid in the scope's group of the v1 hierarchies moat
// uses that systemd does not manage (freezer: systemd realises a scope
// only in the controllers it knows), creating it there, as runc's systemd
// driver joins them by path; it returns what it made, for Delete. On v2
// the scope's one group is systemd's.
func joinUnmanaged(group string, pid int, h *Host) ([]string, error) {
	if h == nil {
		var err error
		if h, err = Detect(); err != nil {
			return nil, err
		}
	}
	if h.Layout == Unified {
		return nil, nil
	}
	mounts, dirs, err := pathDirs(h, group)
	if err != nil {
		return nil, err
	}
	var made []string
	for i, d := range dirs {
		n := len(made)
		fd, err := walkBeneath(group, mounts[i], d, true, &made)
		if err == nil {
			unix.Close(fd)
			if len(made) > n && made[len(made)-1] == d {
				err = writeFile(d, "cgroup.procs", strconv.Itoa(pid))
			}
		}
		if err != nil {
			return made, err
		}
	}
	return made, nil
}
