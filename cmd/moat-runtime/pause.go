package main

// pause freezes the container's processes (the cgroup freezer: v1
// freezer.state, v2 cgroup.freeze) and records it paused; runc's words
// for a container that is neither created nor running.
func (r *runtime) pause(args []string) error {
	id, err := oneID(args, "pause")
	if err != nil {
		return err
	}
	_, err = r.leafOp(id, "pause", ctlRequest{Op: "pause"})
	return err
}

// resume thaws a paused container.
func (r *runtime) resume(args []string) error {
	id, err := oneID(args, "resume")
	if err != nil {
		return err
	}
	_, err = r.leafOp(id, "resume", ctlRequest{Op: "resume"})
	return err
}
