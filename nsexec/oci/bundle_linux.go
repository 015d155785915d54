package oci

import (
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/moat-sandbox/moat/nsexec/hostpath"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// maxConfig bounds config.json; engines write a few KiB (a seccomp profile
// is most of it).
const maxConfig = 4 << 20

// LoadBundle reads bundle/config.json and returns it with the bundle's
// resolved path. The bundle directory is resolved by the rule of
// nsexec/hostpath (a symlink on the way is followed only if root or the
// caller could have planted it: another user's link must not hand root a
// config, and so a rootfs and binds, of theirs; a refused one is a
// *hostpath.LinkError), config.json is opened below it without following a
// symlink, and must be a regular file: a FIFO or device planted there is
// refused without blocking.
func LoadBundle(bundle string) (*specs.Spec, string, error) {
	dir, abs, err := hostpath.Open(bundle, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, "", fmt.Errorf("load bundle %s: %w", bundle, err)
	}
	defer unix.Close(dir)
	fd, err := unix.Openat(dir, "config.json", unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, "", fmt.Errorf("load bundle %s: config.json: %w", abs, err)
	}
	f := os.NewFile(uintptr(fd), "config.json")
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, "", fmt.Errorf("load bundle %s: config.json: %w", abs, err)
	}
	if !st.Mode().IsRegular() {
		return nil, "", fmt.Errorf("load bundle %s: config.json is a %v, not a regular file", abs, st.Mode().Type())
	}
	b, err := io.ReadAll(io.LimitReader(f, maxConfig+1))
	if err != nil {
		return nil, "", fmt.Errorf("load bundle %s: config.json: %w", abs, err)
	}
	if len(b) > maxConfig {
		return nil, "", fmt.Errorf("load bundle %s: config.json is larger than %d bytes", abs, maxConfig)
	}
	var spec specs.Spec
	if err := json.Unmarshal(b, &spec); err != nil {
		return nil, "", fmt.Errorf("load bundle %s: config.json: %w", abs, err)
	}
	return &spec, abs, nil
}
