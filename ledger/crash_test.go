package ledger

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/moat-sandbox/moat/conformance/testenv"
)

// Crash tests run the writer in a copy of the test binary (TestMain
// dispatches on helperVar) and SIGKILL it, the way ledger-kill.test.ts
// does, so the file sees exactly what a real crash leaves.

const (
	helperVar    = "MOAT_LEDGER_TEST_HELPER"
	helperPath   = "MOAT_LEDGER_TEST_PATH"
	helperMarks  = "MOAT_LEDGER_TEST_MARKS"
	helperSplit  = "MOAT_LEDGER_TEST_SPLIT"
	helperGoFile = "MOAT_LEDGER_TEST_GO"
	helperKey    = "MOAT_LEDGER_TEST_KEY"
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperVar); mode != "" {
		if err := runHelper(mode); err != nil {
			fmt.Fprintln(os.Stderr, "helper:", err)
			os.Exit(3)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// runHelper is the writer process. It reports each confirmed append on
// stdout ("I <attempt>" after an intent returned, "O <attempt>" after an
// outcome returned) so the parent knows which rows must survive.
func runHelper(mode string) error {
	if mode == "diskfull" {
		return runDiskFull(os.Getenv(helperPath))
	}
	path := os.Getenv(helperPath)
	l, err := Open(path, WithNow(func() Millis { return 1 }))
	if err != nil {
		return err
	}
	out := bufio.NewWriter(os.Stdout)
	say := func(format string, args ...any) {
		fmt.Fprintf(out, format+"\n", args...)
		out.Flush()
	}
	ctx := context.Background()
	switch mode {
	case "intent-wait", "both-wait":
		in := intentFor(os.Getenv(helperKey), "attempt-"+os.Getenv(helperKey), 1755000000123)
		if err := l.Intent(ctx, in); err != nil {
			return err
		}
		if mode == "both-wait" {
			if err := l.Record(ctx, recordFor(in, OutcomeOK)); err != nil {
				return err
			}
		}
		say("ready")
		select {}
	case "once":
		for {
			if _, err := os.Stat(os.Getenv(helperGoFile)); err == nil {
				break
			}
			time.Sleep(time.Millisecond)
		}
		return l.Intent(ctx, intentFor(os.Getenv(helperKey), "attempt-"+os.Getenv(helperKey), 1))
	case "loop":
		split := os.Getenv(helperSplit) == "1"
		marks := os.Getenv(helperMarks)
		for i := 0; ; i++ {
			id := fmt.Sprintf("%d-%d", os.Getpid(), i)
			in := intentFor("key-"+id, id, Millis(i))
			if err := helperAppend(l, split, func(b []byte) ([]byte, error) { return appendIntentRow(b, &in) }); err != nil {
				return err
			}
			say("I %s", id)
			if err := os.WriteFile(filepath.Join(marks, id), nil, 0o600); err != nil {
				return err
			}
			rec := recordFor(in, OutcomeOK)
			if err := helperAppend(l, split, func(b []byte) ([]byte, error) { return appendRecordRow(b, &rec) }); err != nil {
				return err
			}
			say("O %s", id)
		}
	}
	return fmt.Errorf("unknown helper mode %q", mode)
}

// helperAppend appends a row through the ledger, or, when split is set,
// repairs like the ledger and then writes the row in two write(2) calls
// with a pause between, so a kill can leave a real torn tail. Only this
// test helper ever splits a row.
func helperAppend(l *JSONL, split bool, row func([]byte) ([]byte, error)) error {
	b, err := row(nil)
	if err != nil {
		return err
	}
	if !split {
		return l.append(b)
	}
	l.repairOnce.Do(func() { l.repairErr = l.repair() })
	if l.repairErr != nil {
		return l.repairErr
	}
	k := 1 + rand.IntN(len(b)-1)
	if _, err := unix.Write(int(l.f.Fd()), b[:k]); err != nil {
		return err
	}
	time.Sleep(20 * time.Microsecond)
	_, err = unix.Write(int(l.f.Fd()), b[k:])
	return err
}

func helperCmd(t *testing.T, mode string, env ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), append([]string{helperVar + "=" + mode}, env...)...)
	cmd.Stderr = os.Stderr
	return cmd
}

func TestKillAfterIntentLeavesExactlyThatOrphan(t *testing.T) {
	for _, mode := range []string{"intent-wait", "both-wait"} {
		t.Run(mode, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "effects.jsonl")
			cmd := helperCmd(t, mode, helperPath+"="+path, helperKey+"=charge-1")
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			line, err := bufio.NewReader(stdout).ReadString('\n')
			if err != nil || line != "ready\n" {
				t.Fatalf("helper said %q, %v", line, err)
			}
			cmd.Process.Signal(syscall.SIGKILL)
			cmd.Wait()
			res := mustScan(t, path)
			want := intentFor("charge-1", "attempt-charge-1", 1755000000123)
			if mode == "both-wait" {
				if len(res.Orphans) != 0 || len(res.Outcomes) != 1 {
					t.Fatalf("nothing to reconcile expected: %+v", res)
				}
				return
			}
			if len(res.Orphans) != 1 || res.Orphans[0].Intent != want {
				t.Fatalf("orphans %+v, want exactly %+v", res.Orphans, want)
			}
		})
	}
}

func TestProcessesRepairSameFileConcurrently(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "effects.jsonl")
	if err := os.WriteFile(path, []byte(intentLine(t, intentFor("k0", "a-0", 1))+tornFrag), 0o600); err != nil {
		t.Fatal(err)
	}
	goFile := filepath.Join(dir, "go")
	var cmds []*exec.Cmd
	for i := range 4 {
		cmd := helperCmd(t, "once", helperPath+"="+path, helperGoFile+"="+goFile, fmt.Sprintf("%s=p%d", helperKey, i))
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, cmd)
	}
	time.Sleep(50 * time.Millisecond) // let them reach the barrier
	if err := os.WriteFile(goFile, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("helper: %v", err)
		}
	}
	res := mustScan(t, path)
	if len(res.Intents) != 5 || len(res.Torn) != 1 || len(res.TornTails) != 0 {
		t.Fatalf("want 5 intents and one quarantine row: %d intents, %d torn, tails %v", len(res.Intents), len(res.Torn), res.TornTails)
	}
	assertNoLock(t, path)
}

// TestCrashLoopAccountsForEveryEffect kills a writer at random points, over
// and over, on one file. After every kill the scan must fail on nothing a
// crash produced, keep every row the writer saw confirmed, and account for
// every effect (a marker file): an outcome or an orphaned intent with its
// attempt id. 200 kills (40 with -short); `make soak` sets MOAT_SOAK_KILLS
// (1,000). As root it runs again as nobody, whose file it then is.
func TestCrashLoopAccountsForEveryEffect(t *testing.T) {
	def := 200
	if testing.Short() {
		def = 40
	}
	runs := testenv.SoakCount(t, "MOAT_SOAK_KILLS", def)
	if os.Geteuid() == 0 && !testenv.ReRun() {
		defer func() {
			if !t.Failed() {
				testenv.RunAsUser(t, testenv.NobodyUID, testenv.NobodyGID)
			}
		}()
	}
	start := time.Now()
	defer func() {
		t.Logf("as uid %d: %d kills in %v", os.Geteuid(), runs, time.Since(start).Round(time.Millisecond))
	}()
	dir := t.TempDir()
	path := filepath.Join(dir, "effects.jsonl")
	marks := filepath.Join(dir, "marks")
	if err := os.Mkdir(marks, 0o700); err != nil {
		t.Fatal(err)
	}
	confirmedI, confirmedO := map[string]bool{}, map[string]bool{}
	var tornSeen, tailsSeen int
	for run := range runs {
		split := "0"
		if run%2 == 1 {
			split = "1"
		}
		cmd := helperCmd(t, "loop", helperPath+"="+path, helperMarks+"="+marks, helperSplit+"="+split)
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		r := bufio.NewReader(stdout)
		first, err := r.ReadString('\n')
		if err != nil {
			cmd.Wait()
			t.Fatalf("run %d: helper did not start: %v", run, err)
		}
		time.Sleep(time.Duration(rand.IntN(1500)) * time.Microsecond)
		cmd.Process.Signal(syscall.SIGKILL)
		rest := readAllLines(r)
		cmd.Wait()
		for _, l := range append([]string{strings.TrimSpace(first)}, rest...) {
			if id, ok := strings.CutPrefix(l, "I "); ok {
				confirmedI[id] = true
			} else if id, ok := strings.CutPrefix(l, "O "); ok {
				confirmedO[id] = true
			}
		}

		res, err := Scan(path)
		if err != nil {
			t.Fatalf("run %d: a crash must never read as corruption: %v", run, err)
		}
		tailsSeen += len(res.TornTails)
		tornSeen = len(res.Torn)
		intents, outcomes := map[string]bool{}, map[string]bool{}
		for _, in := range res.Intents {
			intents[in.AttemptID] = true
		}
		for _, o := range res.Outcomes {
			outcomes[o.AttemptID] = true
		}
		for id := range confirmedI {
			if !intents[id] {
				t.Fatalf("run %d: confirmed intent %s lost", run, id)
			}
		}
		for id := range confirmedO {
			if !outcomes[id] {
				t.Fatalf("run %d: confirmed outcome %s lost", run, id)
			}
		}
		entries, err := os.ReadDir(marks)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if !intents[e.Name()] {
				t.Fatalf("run %d: effect %s happened with no intent row", run, e.Name())
			}
		}
		for id := range outcomes {
			if _, err := os.Stat(filepath.Join(marks, id)); err != nil {
				t.Fatalf("run %d: outcome %s without its effect", run, id)
			}
		}
	}
	t.Logf("%d runs, %d confirmed intents, %d torn tails seen live, %d quarantined", runs, len(confirmedI), tailsSeen, tornSeen)
	if tornSeen == 0 || tailsSeen == 0 {
		t.Fatalf("the split writes never produced a torn tail (%d live, %d quarantined): the test did not test repair", tailsSeen, tornSeen)
	}
}

func readAllLines(r *bufio.Reader) []string {
	var out []string
	for {
		l, err := r.ReadString('\n')
		if l = strings.TrimSpace(l); l != "" && err == nil {
			out = append(out, l)
		}
		if err != nil {
			return out
		}
	}
}
