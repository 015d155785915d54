package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// row is one runner's figures for one tool.
type row struct {
	name        string
	median, p95 time.Duration
	seqRate     float64 // runs/s, one at a time
	parRate     float64 // runs/s, two at a time
	failed      string
}

var seq atomic.Int64

// once runs r's command for tool and returns its wall time.
func once(r runner, tool []string) (time.Duration, error) {
	argv := r.argv(tool, int(seq.Add(1)))
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = "/"
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin"}
	if x := os.Getenv("XDG_RUNTIME_DIR"); x != "" {
		cmd.Env = append(cmd.Env, "XDG_RUNTIME_DIR="+x)
	}
	var out limited
	cmd.Stdout, cmd.Stderr = &out, &out
	if r.files != nil {
		files, err := r.files()
		if err != nil {
			return 0, err
		}
		defer func() {
			for _, f := range files {
				f.Close()
			}
		}()
		cmd.ExtraFiles = files
	}
	start := time.Now()
	err := cmd.Run()
	d := time.Since(start)
	if err != nil {
		return d, fmt.Errorf("%v: %s", err, out.String())
	}
	return d, nil
}

// measureAll measures every runner for tool: a warm-up, n sequential runs,
// then n runs two at a time.
func measureAll(env *benchEnv, tool []string, n int) []row {
	var rows []row
	for _, r := range env.runners {
		rows = append(rows, measure(r, tool, n))
	}
	return rows
}

func measure(r runner, tool []string, n int) row {
	res := row{name: r.name}
	times := make([]time.Duration, 0, n)
	var total time.Duration
	err := onThread(r, func() error {
		for range 3 {
			if _, err := once(r, tool); err != nil {
				return err
			}
		}
		for range n {
			d, err := once(r, tool)
			if err != nil {
				return err
			}
			times = append(times, d)
			total += d
		}
		return nil
	})
	if err != nil {
		res.failed = err.Error()
		return res
	}
	slices.Sort(times)
	res.median = times[len(times)/2]
	res.p95 = times[min(len(times)-1, len(times)*95/100)]
	res.seqRate = float64(n) / total.Seconds()

	var next atomic.Int64
	var wg sync.WaitGroup
	var failure atomic.Value
	start := time.Now()
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := onThread(r, func() error {
				for next.Add(1) <= int64(n) {
					if _, err := once(r, tool); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				failure.Store(err.Error())
			}
		}()
	}
	wg.Wait()
	res.parRate = float64(n) / time.Since(start).Seconds()
	if f, ok := failure.Load().(string); ok {
		res.failed = "in parallel: " + f
	}
	return res
}

// onThread runs f on a goroutine locked to a fresh OS thread that r.thread
// prepared (the commands f starts are forked from that thread and inherit
// what it changed, such as its mount namespace); without r.thread it runs
// f as it is. The thread is never unlocked, so the runtime discards it.
func onThread(r runner, f func() error) error {
	if r.thread == nil {
		return f()
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := r.thread(); err != nil {
			errc <- err
			return
		}
		errc <- f()
	}()
	return <-errc
}

// limited keeps the first 4 KiB written to it, for error messages.
type limited struct{ b []byte }

func (l *limited) Write(p []byte) (int, error) {
	if room := 4096 - len(l.b); room > 0 {
		l.b = append(l.b, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

func (l *limited) String() string { return string(l.b) }

var _ io.Writer = (*limited)(nil)
