package nsexec

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestInitThreadsDropped checks from the host that every thread of the
// init, not only the one that started the tool, has the tool's ids, no
// capability and no_new_privs once the tool runs: with a filter and
// without one (then nothing else syncs no_new_privs), as root (whose
// setup threads ran as host uid 0 with capabilities in the sandbox's user
// namespace) and as nobody.
func TestInitThreadsDropped(t *testing.T) {
	asRootAndNobody(t, func(t *testing.T) {
		for _, mode := range []string{"plain", "filtered", "prepared"} {
			filtered := mode == "filtered"
			cfg := shell(t, "read x")
			if filtered {
				cfg.Seccomp = denyMkdirat(t)
			}
			inR, inW, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			var p *Process
			if mode == "prepared" {
				s, perr := Prepare(context.Background(), &Config{Workdir: cfg.Workdir})
				if perr != nil {
					t.Fatal(perr)
				}
				p, err = s.Exec(context.Background(), cfg.Args, cfg.Env, Stdio{Stdin: inR})
			} else {
				p, err = Start(context.Background(), cfg, Stdio{Stdin: inR})
			}
			inR.Close()
			if err != nil {
				inW.Close()
				t.Fatal(err)
			}
			dir := "/proc/" + strconv.Itoa(p.Pid()) + "/task"
			tasks, err := os.ReadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			id := p.HostIdentity()
			uid, gid := strconv.Itoa(int(id.UID)), strconv.Itoa(int(id.GID))
			want := map[string]string{
				"Uid": strings.Repeat(uid+" ", 3) + uid, "Gid": strings.Repeat(gid+" ", 3) + gid,
				"CapInh": "0000000000000000", "CapPrm": "0000000000000000",
				"CapEff": "0000000000000000", "CapAmb": "0000000000000000", "NoNewPrivs": "1",
			}
			if len(tasks) < 2 {
				t.Errorf("the init has %d thread(s); the test means to check several", len(tasks))
			}
			for _, task := range tasks {
				status, err := os.ReadFile(dir + "/" + task.Name() + "/status")
				if err != nil {
					t.Fatal(err)
				}
				seen := 0
				for _, line := range strings.Split(string(status), "\n") {
					k, v, _ := strings.Cut(line, ":")
					w, ok := want[k]
					if !ok {
						continue
					}
					seen++
					if v = strings.Join(strings.Fields(v), " "); v != w {
						t.Errorf("%s: init thread %s: %s %s, want %s", mode, task.Name(), k, v, w)
					}
				}
				if seen != len(want) {
					t.Errorf("init thread %s: %d of %d fields in its status", task.Name(), seen, len(want))
				}
			}
			inW.Close()
			if _, err := p.Wait(); err != nil {
				t.Fatal(err)
			}
		}
	})
}
