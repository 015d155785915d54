package oci

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// Cgroup is the record create keeps of the group it put the container
// in at linux.cgroupsPath: the path and the directories it made for it.
// The monitor removes them when the container ends; a monitor that was
// killed never does, and delete then removes them from this record, those
// levels and no others (an engine's own groups above stay).
type Cgroup struct {
	Path string   `json:"path"`
	Made []string `json:"made,omitempty"`
}

const cgroupFile = "cgroup.json"

// WriteCgroup records c (cgroup.json), atomically.
func (d *Dir) WriteCgroup(c *Cgroup) error {
	return d.writeJSON(cgroupFile, c)
}

// ReadCgroup reads cgroup.json; nil and no error when create made no
// record (the container had no cgroupsPath).
func (d *Dir) ReadCgroup() (*Cgroup, error) {
	fd, err := unix.Openat(d.fd, cgroupFile, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the cgroup of %s: %w", d.id, err)
	}
	f := os.NewFile(uintptr(fd), cgroupFile)
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("read the cgroup of %s: %w", d.id, err)
	}
	var c Cgroup
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("read the cgroup of %s: %w", d.id, err)
	}
	return &c, nil
}
