package main

import (
	"bufio"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// runcEvent decodes what runc's types.Event carries for the fields moat
// fills, by their JSON names.
type runcEvent struct {
	Type string `json:"type"`
	ID   string `json:"id"`
	Data struct {
		CPU struct {
			Usage struct {
				Total uint64 `json:"total"`
			} `json:"usage"`
		} `json:"cpu"`
		Memory struct {
			Usage struct {
				Limit uint64 `json:"limit"`
				Usage uint64 `json:"usage"`
				Max   uint64 `json:"max"`
			} `json:"usage"`
		} `json:"memory"`
		Pids struct {
			Current uint64 `json:"current"`
			Limit   uint64 `json:"limit"`
		} `json:"pids"`
	} `json:"data"`
}

// TestEventsStats: events --stats prints one stats event in runc's JSON
// with the container's leaf's use (CPU a busy container burns, memory,
// its processes) and its limits; the stream repeats it every --interval
// and ends when the container does; a stopped container and a bad
// interval are refused.
func TestEventsStats(t *testing.T) {
	root := t.TempDir()
	spec, vol := counter(t)
	withLeaf(t, spec)
	mem := int64(64 << 20)
	spec.Linux.Resources.Memory = &specs.LinuxMemory{Limit: &mem}
	running(t, root, "ev1", spec)
	if !counts(t, vol, 0) {
		t.Fatal("the counter does not count")
	}
	out, errs, code := rt(t, root, "events", "--stats", "ev1")
	if code != 0 || strings.Count(out, "\n") != 1 {
		t.Fatalf("events --stats: exit %d: %q %s", code, out, errs)
	}
	var ev runcEvent
	if err := json.Unmarshal([]byte(out), &ev); err != nil {
		t.Fatalf("events --stats: %v in %q", err, out)
	}
	d := ev.Data
	if ev.Type != "stats" || ev.ID != "ev1" || d.CPU.Usage.Total == 0 || d.Memory.Usage.Usage == 0 ||
		d.Memory.Usage.Limit != uint64(mem) || d.Memory.Usage.Max < d.Memory.Usage.Usage || d.Pids.Current < 2 || d.Pids.Limit != 64 {
		t.Fatalf("events --stats: %+v from %s", ev, out)
	}
	if _, errs, code := rt(t, root, "events", "--interval", "0s", "ev1"); code != 1 || !strings.Contains(errs, "greater than 0") {
		t.Errorf("events --interval 0s: exit %d: %s", code, errs)
	}

	cmd := exec.Command(runtimeBin(t), "--root", root, "events", "--interval", "100ms", "ev1")
	so, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	sc := bufio.NewScanner(so)
	var totals []uint64
	for len(totals) < 3 && sc.Scan() {
		var e runcEvent
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil || e.Type != "stats" {
			t.Fatalf("stream: %q: %v", sc.Text(), err)
		}
		totals = append(totals, e.Data.CPU.Usage.Total)
	}
	if len(totals) != 3 || totals[2] <= totals[0] {
		t.Fatalf("stream: CPU totals %v, want three, growing", totals)
	}
	if _, errs, code := rt(t, root, "kill", "ev1", "KILL"); code != 0 {
		t.Fatalf("kill: exit %d: %s", code, errs)
	}
	for sc.Scan() {
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("the stream of an ended container: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the stream did not end with the container")
	}
	waitStatus(t, root, "ev1", specs.StateStopped)
	if _, errs, code := rt(t, root, "events", "--stats", "ev1"); code != 1 || !strings.Contains(errs, "container not running") {
		t.Errorf("events --stats of a stopped container: exit %d: %s", code, errs)
	}
}

// TestEventsOOM: the stream reports an "oom" event once the OOM killer
// has killed in the container (a 256 MiB line through tail under a 32 MiB
// limit), and the container's stats go on.
func TestEventsOOM(t *testing.T) {
	root := t.TempDir()
	_, spec := bundle(t, "/bin/sh", "-c", "sleep 1; head -c 256m /dev/zero | tail -n 1 > /dev/null; sleep 1000")
	withLeaf(t, spec)
	mem := int64(32 << 20)
	spec.Linux.Resources.Memory = &specs.LinuxMemory{Limit: &mem}
	running(t, root, "oom1", spec)
	cmd := exec.Command(runtimeBin(t), "--root", root, "events", "--interval", "100ms", "oom1")
	var serr strings.Builder
	cmd.Stderr = &serr
	so, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	timer := time.AfterFunc(30*time.Second, func() { cmd.Process.Kill() })
	defer timer.Stop()
	sc := bufio.NewScanner(so)
	var types []string
	for sc.Scan() {
		var e runcEvent
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("stream: %q: %v", sc.Text(), err)
		}
		types = append(types, e.Type)
		if e.Type == "oom" {
			if e.ID != "oom1" {
				t.Errorf("oom event for %q", e.ID)
			}
			break
		}
	}
	if len(types) < 2 || types[len(types)-1] != "oom" || types[0] != "stats" {
		// Which way the stream ended says whether the container did (the
		// OOM killer took more than the line's tail) or events failed.
		werr := cmd.Wait()
		st, _, _ := rt(t, root, "state", "oom1")
		t.Fatalf("stream: events %v, want stats and then an oom; events ended: %v, stderr %q; state: %s", types, werr, serr.String(), st)
	}
	if !sc.Scan() || !strings.Contains(sc.Text(), `"type":"stats"`) {
		t.Errorf("after the oom event: %q, want the stats that go on", sc.Text())
	}
}
