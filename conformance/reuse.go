package conformance

import (
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/executor"
)

// RunReuse is the hostile battery of a provider that reuses its sandboxes
// (native.WithReuse; issue 33): newProvider must build one whose
// sandboxes serve several dispatches each. A tool leaves behind everything
// a tool can (a double-forked, setsid process that ignores SIGTERM, a
// 32 MiB child, files in every writable place, SysV shared memory, a
// semaphore and a message queue, a POSIX message queue, a listening
// abstract socket held by a would-be survivor), and the next dispatch on
// the same sandbox finds none of it; a change to pid 1 is undone or ends
// the sandbox; a dispatch that ends by a signal, a timeout (one the tool
// survives with exit 0 too) or the output cap ends its sandbox.
//
// A dispatch knows its sandbox by its pid namespace and the start time of
// pid 1 (a namespace's inode number can be reused once it is freed); the
// battery waits for the sandbox of a first dispatch to serve again, which
// a provider that never reuses fails.
func RunReuse(t *testing.T, newProvider Factory) {
	t.Helper()
	runner, err := runnerPath()
	if err != nil {
		t.Fatalf("conformance: prepare the runner program: %v", err)
	}
	for _, c := range reuseChecks {
		t.Run(c.id+"_"+c.name, func(t *testing.T) {
			c.run(&kit{t: t, id: c.id, runner: runner, factory: newProvider})
		})
	}
}

func init() {
	probes["probe-shell"] = func(args map[string]json.RawMessage) any {
		var script, term string
		_ = json.Unmarshal(args["script"], &script)
		_ = json.Unmarshal(args["term"], &term)
		if term == "exit0" {
			// A tool that survives its timeout: it ends with exit 0 at the
			// SIGTERM, with a valid result.
			ch := make(chan os.Signal, 1)
			signal.Notify(ch, syscall.SIGTERM)
			go func() {
				<-ch
				os.Stdout.WriteString(`{"out":"term"}`)
				os.Exit(0)
			}()
		}
		cmd := exec.Command("/bin/sh", "-c", script)
		cmd.Env = append(os.Environ(), "RUNNER="+os.Args[0])
		cmd.ExtraFiles = []*os.File{os.Stdout} // the tool's own stdout, at 3
		out, err := cmd.CombinedOutput()
		return map[string]any{"out": string(out), "ok": err == nil}
	}
	// A listening abstract socket passed to a would-be survivor: a
	// sleep in a session of its own that ignores SIGTERM and holds it.
	probes["probe-listen"] = func(map[string]json.RawMessage) any {
		l, err := net.Listen("unix", "@moat-reuse")
		if err != nil {
			return map[string]any{"err": err.Error()}
		}
		f, err := l.(*net.UnixListener).File()
		if err != nil {
			return map[string]any{"err": err.Error()}
		}
		cmd := exec.Command("/bin/sh", "-c", `trap "" TERM; exec sleep 1000`)
		cmd.ExtraFiles = []*os.File{f}
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		if err := cmd.Start(); err != nil {
			return map[string]any{"err": err.Error()}
		}
		return map[string]any{"survivor": cmd.Process.Pid}
	}
}

// whoAmI names the dispatch's sandbox: its pid namespace and pid 1's start
// time (field 22 of /proc/1/stat, which a non-dumpable pid 1 still shows).
const whoAmI = `echo "$(readlink /proc/self/ns/pid) $(cut -d' ' -f22 /proc/1/stat)"`

// run dispatches script through p and returns the sandbox it ran in and
// the rest of its output.
func (k *kit) run(p executor.Provider, script string, extra map[string]any) (sandbox, out string, err error) {
	k.t.Helper()
	args := map[string]any{"behavior": "probe-shell", "script": whoAmI + "\n" + script}
	for key, v := range extra {
		args[key] = v
	}
	raw, _ := json.Marshal(args)
	res, err := k.dispatch(p, k.request("probe_shell", string(raw)))
	if err != nil {
		return "", "", err
	}
	var got struct {
		Out string `json:"out"`
		OK  bool   `json:"ok"`
	}
	k.decode(res, &got)
	if got.Out == "term" {
		return "", "term", nil
	}
	first, rest, _ := strings.Cut(got.Out, "\n")
	if !got.OK {
		k.fatalf("the script failed: %q", got.Out)
	}
	return first, rest, nil
}

// again dispatches script until it runs in sandbox (the provider gives a
// sandbox back after its reset, maybe after a dispatch started
// elsewhere), and returns its output.
func (k *kit) again(p executor.Provider, sandbox, script string) string {
	k.t.Helper()
	for range 100 {
		got, out, err := k.run(p, script, nil)
		if err != nil {
			k.fatalf("dispatch: %v", err)
		}
		if got == sandbox {
			return out
		}
		time.Sleep(20 * time.Millisecond)
	}
	k.fatalf("the sandbox %s never served another dispatch: the provider does not reuse", sandbox)
	return ""
}

// warm dispatches until two dispatches in a row ran on one sandbox (the
// first ones may start cold, beside a pool that fills) and returns it.
func (k *kit) warm(p executor.Provider) string {
	k.t.Helper()
	last := ""
	for range 100 {
		got, _, err := k.run(p, "", nil)
		if err != nil {
			k.fatalf("dispatch: %v", err)
		}
		if got == last {
			return got
		}
		last = got
		time.Sleep(20 * time.Millisecond)
	}
	k.fatalf("no sandbox served two dispatches: the provider does not reuse")
	return ""
}

// leaveBehind leaves something of the tool in every place a reset renews.
const leaveBehind = `
for d in /tmp /dev/shm /work; do echo left > $d/left || exit 1; done
for d in /dev/mqueue; do [ -d $d ] && { : > $d/left || exit 1; }; done
ipcmk -M 4096 >/dev/null && ipcmk -S 1 >/dev/null && ipcmk -Q >/dev/null || exit 1
(setsid sh -c 'trap "" TERM; exec sleep 1000' >/dev/null 2>&1 &)
(setsid sh -c 'trap "" TERM; x=$(head -c 33554432 /dev/zero | tr "\0" a); sleep 1000' >/dev/null 2>&1 &)
echo '{"tool":"l","args":{"behavior":"probe-listen"}}' > /tmp/req
"$RUNNER" < /tmp/req >/dev/null 2>&1
for i in $(seq 100); do grep -q moat-reuse /proc/net/unix && break; sleep 0.02; done
grep -q moat-reuse /proc/net/unix || { echo "no listener"; exit 1; }
echo left`

// findNothing reports what it finds of leaveBehind: the processes it sees
// by the shell's own glob (pid 1, the runner and this shell are three),
// files in every writable place, SysV objects, POSIX queues, the socket.
const findNothing = `
set -- /proc/[0-9]*; echo "procs $#"
for d in /tmp /dev/shm /work /dev/mqueue; do
	for f in $d/* $d/.[!.]*; do
		case "$RUNNER" in "$f"/*) continue;; esac # the runner's bind
		[ -e "$f" ] && echo "found $f"
	done
done
[ "$(ipcs -m -s -q | grep -c '^0x')" = 0 ] || echo "found sysv"
grep -q moat-reuse /proc/net/unix && echo "found socket"
echo checked`

// pid1Attrs prints what a tool could change of pid 1: its limits, nice
// value, scheduling policy and oom_score_adj.
const pid1Attrs = `cat /proc/1/limits; cut -d' ' -f19,41 /proc/1/stat; cat /proc/1/oom_score_adj`

var reuseChecks = []struct {
	id, name string
	run      func(*kit)
}{
	{"u1", "nothing a tool leaves reaches the next dispatch on its sandbox", checkLeftovers},
	{"u2", "pid 1's attributes are as they were, or the sandbox is gone", checkPid1},
	{"u3", "a dispatch that ends by a signal ends its sandbox", func(k *kit) { checkEnds(k, Config{}, `kill -KILL $PPID; sleep 5`, nil) }},
	{"u4", "a timed-out dispatch ends its sandbox", func(k *kit) { checkEnds(k, Config{Timeout: 500 * time.Millisecond}, `sleep 5`, nil) }},
	{"u5", "a timed-out dispatch that exits 0 ends its sandbox", func(k *kit) {
		checkEnds(k, Config{Timeout: 500 * time.Millisecond}, `sleep 5`, map[string]any{"term": "exit0"})
	}},
	{"u6", "a dispatch over the output cap ends its sandbox", func(k *kit) {
		checkEnds(k, Config{MaxOutputBytes: 4096}, `head -c 100000 /dev/zero | tr "\0" a >&3; sleep 5`, nil)
	}},
}

func checkLeftovers(k *kit) {
	p := k.provider(Config{})
	sb := k.warm(p)
	if out := k.again(p, sb, leaveBehind); out != "left\n" {
		k.fatalf("the tool that leaves things: %q", out)
	}
	if got := k.again(p, sb, findNothing); got != "procs 3\nchecked\n" {
		k.fatalf("the next dispatch on the same sandbox found %q", got)
	}
}

func checkPid1(k *kit) {
	p := k.provider(Config{})
	sb := k.warm(p)
	before := k.again(p, sb, pid1Attrs)
	if got := k.again(p, sb, `renice -n 5 -p 1; chrt --idle -p 0 1; echo 900 > /proc/1/oom_score_adj; echo tried`); got == "" {
		k.fatalf("no output")
	}
	// Whether the changes were refused or not, the same sandbox must show
	// pid 1 as before (or never serve again: then each later dispatch
	// runs elsewhere, and this one's output is another pid 1's).
	for range 20 {
		now, after, err := k.run(p, pid1Attrs, nil)
		if err != nil {
			k.fatalf("dispatch: %v", err)
		}
		if now == sb && after != before {
			k.fatalf("pid 1 changed on the same sandbox:\n%s\nwas\n%s", after, before)
		}
	}
	// An rlimit pid 1 cannot get back ends the sandbox.
	sb2 := k.warm(p)
	time.Sleep(200 * time.Millisecond)
	k.again(p, sb2, `prlimit --pid 1 --nofile=64:64 || echo refused`)
	for range 20 {
		now, after, _ := k.run(p, pid1Attrs, nil)
		if now == sb2 {
			k.fatalf("the sandbox whose pid 1 got a new rlimit served again: %s", after)
		}
	}
}

// checkEnds runs script on a sandbox that served once and checks that it
// never serves again.
func checkEnds(k *kit, cfg Config, script string, extra map[string]any) {
	p := k.provider(cfg)
	sb := k.warm(p)
	// The next dispatch is the hostile one, on sb once its reset gave it
	// back; if it ran elsewhere, sb serves again below and the check
	// fails, never passes wrongly.
	time.Sleep(200 * time.Millisecond)
	_, _, _ = k.run(p, script, extra)
	for range 20 {
		got, _, err := k.run(p, "", nil)
		if err != nil {
			k.fatalf("dispatch: %v", err)
		}
		if got == sb {
			k.fatalf("the sandbox served again after the dispatch that ended badly")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
