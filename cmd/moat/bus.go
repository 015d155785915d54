package main

import (
	"os"
	"path/filepath"
)

// userBus is the D-Bus address of the user's systemd manager, found as
// sd_bus_open_user(3) does: $DBUS_SESSION_BUS_ADDRESS, else the socket
// $XDG_RUNTIME_DIR/bus when it exists. "" as root (moat does not use the
// system bus, see native.WithSystemdBus) and where there is none (a
// container, a cron job of a user without lingering, a host without
// systemd): the library reads no environment, so the CLI does it here.
func userBus() string {
	if os.Geteuid() == 0 {
		return ""
	}
	if a := os.Getenv("DBUS_SESSION_BUS_ADDRESS"); a != "" {
		return a
	}
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		p := filepath.Join(d, "bus")
		if fi, err := os.Stat(p); err == nil && fi.Mode()&os.ModeSocket != 0 {
			return "unix:path=" + p
		}
	}
	return ""
}
