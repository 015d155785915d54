// Package oci turns an OCI bundle (runtime-spec config.json) into a moat
// sandbox and keeps the state of OCI containers between invocations of an
// OCI runtime command line (cmd/moat-runtime).
//
// Translate maps a config onto an nsexec.Config: what moat can honour is
// honoured, what moat's own floor already covers (masked /proc, its own
// /dev, no capabilities, no_new_privs) is checked to be covered,
// and everything else is refused with an *UnsupportedError naming the field,
// the value and what to do instead. nsexec learns nothing about bundles.
//
// State is a root directory of container directories, one per validated
// container ID, each 0700 and opened without following a symlink; the files
// in it are written by rename, so a reader never sees half a state.
package oci
