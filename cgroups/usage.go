package cgroups

import "time"

// Usage is what a leaf consumed, read by Leaf.Stats. Counters are zero when
// the host does not provide them (see each field).
type Usage struct {
	// MemoryPeak is the highest memory usage seen, in bytes: v1
	// memory.max_usage_in_bytes, v2 memory.peak (kernel >= 5.19; older
	// kernels give memory.current instead). MemoryCurrent is the usage now.
	MemoryPeak    uint64
	MemoryCurrent uint64
	// OOMKills counts processes the OOM killer killed in the leaf: v1
	// memory.oom_control "oom_kill" (kernel >= 4.13), v2 memory.events
	// "oom_kill". OOMKilled is OOMKills > 0; on a v1 kernel without the
	// counter it falls back to memory.failcnt > 0 (the limit was hit, which
	// usually but not always ends in a kill).
	OOMKills  uint64
	OOMKilled bool
	// PidsCurrent is the number of tasks now; PidsLimitHits counts forks the
	// pids limit refused (pids.events "max").
	PidsCurrent   uint64
	PidsLimitHits uint64
	// CPUTime is the CPU time used (v1 cpuacct.usage, v2 cpu.stat
	// usage_usec); CPUThrottled counts the periods the quota throttled and
	// CPUThrottledTime their total length (cpu.stat).
	CPUTime          time.Duration
	CPUThrottled     uint64
	CPUThrottledTime time.Duration
}
