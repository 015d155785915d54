package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"time"

	"github.com/moat-sandbox/moat/nsexec/oci"
)

// runc's event stream (runc's types/events.go), as much of it as moat's
// leaf measures: cpu, memory and pids. Engines decode it into runc's own
// types, where the fields moat does not fill (cpuset, blkio, hugetlb, ...)
// stay zero.
type event struct {
	Type string      `json:"type"` // "stats", or "oom" when the OOM killer killed in the container
	ID   string      `json:"id"`
	Data *eventStats `json:"data,omitempty"`
}

type eventStats struct {
	CPU    eventCPU    `json:"cpu"`
	Memory eventMemory `json:"memory"`
	Pids   eventPids   `json:"pids"`
}

type eventCPU struct {
	Usage      eventCPUUsage   `json:"usage"`
	Throttling eventThrottling `json:"throttling"`
}

type eventCPUUsage struct {
	Total  uint64 `json:"total,omitempty"` // ns
	Kernel uint64 `json:"kernel"`
	User   uint64 `json:"user"`
}

type eventThrottling struct {
	ThrottledPeriods uint64 `json:"throttledPeriods,omitempty"`
	ThrottledTime    uint64 `json:"throttledTime,omitempty"` // ns
}

type eventMemory struct {
	Usage eventMemoryEntry `json:"usage"`
	Swap  eventMemoryEntry `json:"swap"`
}

type eventMemoryEntry struct {
	Limit   uint64 `json:"limit"` // bytes; the largest uint64 when unlimited
	Usage   uint64 `json:"usage,omitempty"`
	Max     uint64 `json:"max,omitempty"`
	Failcnt uint64 `json:"failcnt"` // not read: 0
}

type eventPids struct {
	Current uint64 `json:"current,omitempty"`
	Limit   uint64 `json:"limit,omitempty"` // 0 when unlimited
}

// statsEvent turns the monitor's reading of the leaf into runc's stats.
func statsEvent(id string, s *leafStats) event {
	u, set := s.Usage, s.Settings
	limit := func(v int64) uint64 {
		if v <= 0 {
			return math.MaxUint64
		}
		return uint64(v)
	}
	d := &eventStats{
		CPU: eventCPU{
			Usage:      eventCPUUsage{Total: uint64(u.CPUTime)},
			Throttling: eventThrottling{ThrottledPeriods: u.CPUThrottled, ThrottledTime: uint64(u.CPUThrottledTime)},
		},
		Memory: eventMemory{
			Usage: eventMemoryEntry{Limit: limit(set.Memory), Usage: u.MemoryCurrent, Max: u.MemoryPeak},
			Swap:  eventMemoryEntry{Limit: limit(set.MemorySwap)},
		},
		Pids: eventPids{Current: u.PidsCurrent, Limit: uint64(max(set.Pids, 0))},
	}
	return event{Type: "stats", ID: id, Data: d}
}

// events prints the container's stats as runc events does: once with
// --stats, else every --interval (5s) until the container ends, with an
// "oom" event whenever the OOM killer has killed in it since the last.
func (r *runtime) events(args []string) error {
	vals, flags, pos, err := parseCommand(args, []string{"interval"}, []string{"stats"})
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return errors.New("events wants exactly one container ID")
	}
	id := pos[0]
	interval := 5 * time.Second
	if v, ok := vals["interval"]; ok {
		if interval, err = time.ParseDuration(v); err != nil {
			return fmt.Errorf("events --interval %q: %w", v, err)
		}
		if interval <= 0 {
			return errors.New("events --interval: duration interval must be greater than 0")
		}
	}
	enc := json.NewEncoder(os.Stdout)
	read := func() (*leafStats, error) {
		rep, err := r.leafOp(id, "events", ctlRequest{Op: "stats"})
		if err != nil {
			return nil, err
		}
		if rep.Stats == nil {
			return nil, fmt.Errorf("events container %s: the monitor sent no stats", id)
		}
		return rep.Stats, nil
	}
	s, err := read()
	if err != nil {
		return err
	}
	if flags["stats"] {
		return enc.Encode(statsEvent(id, s))
	}
	oom := s.Usage.OOMKills
	for {
		if s.Usage.OOMKills > oom {
			oom = s.Usage.OOMKills
			if err := enc.Encode(event{Type: "oom", ID: id}); err != nil {
				return err
			}
		}
		if err := enc.Encode(statsEvent(id, s)); err != nil {
			return err
		}
		time.Sleep(interval)
		if s, err = read(); errors.Is(err, errNotRunning) || errors.Is(err, oci.ErrNotExist) {
			return nil // the container ended (or was deleted): so does its stream
		} else if err != nil {
			return err
		}
	}
}
