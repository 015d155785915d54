package nsexec

import (
	"os"

	"golang.org/x/sys/unix"
)

// WithNetNS starts the sandbox in the network namespace open at f (an nsfs
// descriptor, /proc/PID/ns/net or an `ip netns` bind) instead of a new one:
// an OCI engine's, which it configured (veth, addresses, routes) before
// the container starts. Every other namespace is still new, the user
// namespace included, so the sandbox holds no capability over the network
// it joins; Config.Network must stay NetworkNone, since lo belongs to the
// engine too. The caller keeps f open until Start or Prepare returned.
//
// Why on the spawning thread: a process joins a network namespace with
// setns(2), which moves only the calling thread, and clone(2) gives the
// child the calling thread's namespaces; own() spawns from a thread it
// locked and never gives back to the Go runtime, so no other goroutine
// ever runs in the joined namespace (runc does the same join in its C
// pre-runtime, nsexec.c, before its clone).
func WithNetNS(f *os.File) Option { return func(o *options) { o.netns = f } }

// nsGetNSType is NS_GET_NSTYPE (linux/nsfs.h): the CLONE_NEW* type of an
// nsfs descriptor.
const nsGetNSType = 0xb703

// joinNetNS moves the calling (locked) thread into the network namespace
// open at f; nil is no change.
func joinNetNS(f *os.File) error {
	if f == nil {
		return nil
	}
	typ, err := unix.IoctlRetInt(int(f.Fd()), nsGetNSType)
	if err == nil && typ != unix.CLONE_NEWNET {
		err = unix.EINVAL
	}
	if err != nil {
		return &SetupError{Step: StepNetwork, Path: f.Name(), Detail: "not a network namespace", Errno: errnoOf(err)}
	}
	if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
		return &SetupError{Step: StepNetwork, Path: f.Name(), Detail: "join the network namespace (setns needs CAP_SYS_ADMIN over it)", Errno: errnoOf(err)}
	}
	return nil
}
