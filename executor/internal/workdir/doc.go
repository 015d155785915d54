// Package workdir creates, removes and sweeps the per-call workdirs of the
// dispatch pipeline and of `moat run`.
//
// # Removal
//
// RemoveAll removes a directory a tool has written to. It never follows a
// symlink: every entry is unlinked with unlinkat(2) relative to a
// descriptor of its parent, directories are opened with O_NOFOLLOW, and a
// directory the tool made unreadable or unwritable (chmod 0500, 0000) is
// given back its owner's permissions through a descriptor of that very
// directory, never through a path the tool could swap for a link.
//
// # Leftovers of a killed owner
//
// A process that is SIGKILLed cannot remove its workdir. So each workdir
// Create makes has a marker: a file of the same name in the base's
// ".moat-<uid>" directory (0700, this user's), exclusively flock(2)ed by
// the creating process for as long as the workdir is in use. The kernel
// drops the lock when the last descriptor of the lock's open file
// description closes, so a held lock means a live owner, and a crashed
// owner frees it with no cleanup of its own. Sweep, called when a
// provider starts, removes every workdir whose marker's lock is free: one
// open of the marker directory, which does not exist unless a run is going
// on or one was killed, and one readdir of it. Only the calling user's
// markers are read, so only what belonged to dead processes of the same
// user is touched.
//
// A marker gets its final name only once it is locked (it is created
// under a dot name, locked, then renamed), so Sweep never takes a live
// run's marker for a dead one.
package workdir
