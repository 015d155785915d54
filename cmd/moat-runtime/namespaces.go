package main

import (
	"fmt"
	"os"

	"github.com/moat-sandbox/moat/nsexec"
	"github.com/moat-sandbox/moat/nsexec/oci"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// joinOptions opens the namespaces the config joins (the engine's network
// namespace, a pod sandbox's ipc, uts, pid, cgroup) for nsexec.WithJoin,
// which refuses one of the host's, and writes the net.* sysctls of a
// joined network namespace, which the sandbox cannot (oci.Plan.NetSysctl).
// The returned files are the namespaces, one per plan.Joins entry, and the
// func closes them once the sandbox was spawned.
func joinOptions(plan *oci.Plan) ([]nsexec.Option, []*os.File, func(), error) {
	var files []*os.File
	closeAll := func() {
		for _, f := range files {
			f.Close()
		}
	}
	var opts []nsexec.Option
	var net *os.File
	for i, ns := range plan.Joins {
		f, err := os.OpenFile(ns.Path, os.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			closeAll()
			return nil, nil, nil, fmt.Errorf("config.json linux.namespaces: the %s namespace to join: %w", ns.Type, err)
		}
		files = append(files, f)
		opts = append(opts, nsexec.WithJoin(f))
		if ns.Type == specs.NetworkNamespace {
			net = files[i]
		}
	}
	if len(plan.NetSysctl) > 0 && net == nil {
		closeAll()
		return nil, nil, nil, fmt.Errorf("config.json linux.sysctl: net.* sysctls for a joined network namespace, but none is joined")
	}
	if len(plan.NetSysctl) > 0 {
		if err := nsexec.WriteNetSysctls(net, plan.NetSysctl); err != nil {
			closeAll()
			return nil, nil, nil, fmt.Errorf("config.json linux.sysctl: %w", err)
		}
	}
	return opts, files, closeAll, nil
}
