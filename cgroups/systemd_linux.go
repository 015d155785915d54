package cgroups

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	sd "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
)

// scopePrefix names moat's transient scopes, moat-<pid>-<start>.scope: the
// owner in the name lets a later moat stop the scope of a dead one.
const scopePrefix = "moat-"

// busTimeout bounds each conversation with the user's systemd manager.
const busTimeout = 15 * time.Second

// dialUserBus connects to the user's systemd manager at address. The user
// bus authenticates the peer by its uid (SASL EXTERNAL), as
// dbus.SessionBus does; go-systemd's own constructors would read
// $DBUS_SESSION_BUS_ADDRESS, which library code must not.
func dialUserBus(ctx context.Context, address string) (*sd.Conn, error) {
	return sd.NewConnection(func() (*dbus.Conn, error) {
		c, err := dbus.Dial(address, dbus.WithContext(ctx))
		if err != nil {
			return nil, err
		}
		if err := c.Auth([]dbus.Auth{dbus.AuthExternal(strconv.Itoa(os.Getuid()))}); err != nil {
			c.Close()
			return nil, err
		}
		if err := c.Hello(); err != nil {
			c.Close()
			return nil, err
		}
		return c, nil
	})
}

// startScope asks the user's systemd manager for a transient scope with
// Delegate=yes holding this process (podman's and crun's systemd cgroup
// manager do the same; systemd.scope(5), "Delegate=" in
// systemd.resource-control(5)), after stopping the scopes of moat
// processes that are gone. It returns the unit name once the job is done:
// this process is then in the scope's cgroup. systemd removes the scope
// when its last process exits (a scope cannot be restarted, and
// CollectMode=inactive-or-failed drops it even when a sandbox was killed).
func startScope(address string, o owner, log *slog.Logger) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), busTimeout)
	defer cancel()
	conn, err := dialUserBus(ctx, address)
	if err != nil {
		return "", fmt.Errorf("connect to the user's systemd manager at %s: %w", address, err)
	}
	defer conn.Close()
	stopDeadScopes(ctx, conn, log)
	name := scopePrefix + strconv.Itoa(o.pid) + "-" + strconv.FormatUint(o.start, 10) + ".scope"
	props := []sd.Property{
		sd.PropDescription(scopeDescription(o.pid)),
		sd.PropPids(uint32(o.pid)),
		{Name: "Delegate", Value: dbus.MakeVariant(true)},
		{Name: "CollectMode", Value: dbus.MakeVariant("inactive-or-failed")},
	}
	done := make(chan string, 1)
	if _, err := conn.StartTransientUnitContext(ctx, name, "fail", props, done); err != nil {
		return "", fmt.Errorf("start the transient scope %s: %w", name, err)
	}
	select {
	case r := <-done:
		if r != "done" {
			return "", fmt.Errorf("start the transient scope %s: job %s", name, r)
		}
	case <-ctx.Done():
		return "", fmt.Errorf("start the transient scope %s: %w", name, ctx.Err())
	}
	log.Debug("moved into a transient systemd scope with Delegate=yes", "scope", name)
	return name, nil
}

// stopDeadScopes stops moat's scopes whose owner is gone: a scope whose
// processes all exited is already gone, so these still hold a sandbox a
// killed moat left running; stopping the scope kills it. A scope counts as
// moat's only when its name is exactly startScope's (moat-PID-START.scope,
// both plain decimals) and its description is the one startScope gave it:
// a unit another program of the user named in a similar pattern is never
// stopped, nor one whose owner (pid and start time) still runs.
func stopDeadScopes(ctx context.Context, conn *sd.Conn, log *slog.Logger) {
	units, err := conn.ListUnitsByPatternsContext(ctx, nil, []string{scopePrefix + "*.scope"})
	if err != nil {
		log.Debug("list moat's systemd scopes", "err", err)
		return
	}
	for _, u := range units {
		o, ok := parseScopeName(u.Name)
		if !ok || u.Description != scopeDescription(o.pid) || o.alive() {
			continue
		}
		log.Info("stopping the systemd scope of a moat process that is gone", "scope", u.Name, "owner", o.pid)
		done := make(chan string, 1)
		if _, err := conn.StopUnitContext(ctx, u.Name, "replace", done); err != nil {
			log.Warn("stop a stale moat scope", "scope", u.Name, "err", err)
			continue
		}
		select {
		case <-done:
		case <-ctx.Done():
			return
		}
	}
}

// scopeDescription is the Description= of the scope moat asks for.
func scopeDescription(pid int) string { return "moat sandboxes of process " + strconv.Itoa(pid) }

// parseScopeName is the inverse of startScope's naming: exactly
// moat-PID-START.scope, both canonical decimals; ok is false for anything
// else.
func parseScopeName(name string) (owner, bool) {
	s, ok1 := strings.CutPrefix(name, scopePrefix)
	s, ok2 := strings.CutSuffix(s, ".scope")
	pidS, startS, ok3 := strings.Cut(s, "-")
	if !ok1 || !ok2 || !ok3 {
		return owner{}, false
	}
	pid, err1 := strconv.Atoi(pidS)
	start, err2 := strconv.ParseUint(startS, 10, 64)
	if err1 != nil || err2 != nil || pid <= 0 || strconv.Itoa(pid) != pidS || strconv.FormatUint(start, 10) != startS {
		return owner{}, false
	}
	return owner{pid: pid, start: start}, true
}
