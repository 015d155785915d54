package subprocess_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/conformance/testenv"
	"github.com/moat-sandbox/moat/executor"
	"github.com/moat-sandbox/moat/executor/subprocess"
	"github.com/moat-sandbox/moat/ledger"
	"golang.org/x/sys/unix"
)

// diskFullVar carries the tiny tmpfs's directory to the re-run of
// TestDispatchOnAFullDiskIsALedgerError in a private mount namespace.
const diskFullVar = "MOAT_SUBPROCESS_DISKFULL"

// TestDispatchOnAFullDiskIsALedgerError (issue 14, "The ledger under
// faults"): a tool fills the disk its JSONL ledger is on, so the outcome
// append fails; the dispatch must report an *executor.Error with code
// ledger (the tool itself succeeded), the next dispatch once space is back
// must succeed, and the file must scan without a corrupt line: what was
// lost shows as an orphaned intent. The ledger is on a 16 KiB tmpfs in a
// private mount namespace; as root and as nobody.
func TestDispatchOnAFullDiskIsALedgerError(t *testing.T) {
	if dir := os.Getenv(diskFullVar); dir != "" {
		if err := diskFullDispatch(t, dir); err != nil {
			t.Fatal(err)
		}
		return
	}
	body := func(t *testing.T) {
		cmd := exec.Command(os.Args[0], "-test.run=^TestDispatchOnAFullDiskIsALedgerError$", "-test.v")
		cmd.Env = append(os.Environ(), diskFullVar+"="+t.TempDir())
		cmd.SysProcAttr = testenv.PrivateMounts()
		out, err := cmd.CombinedOutput()
		t.Logf("in a private mount namespace:\n%s", out)
		if err != nil || !strings.Contains(string(out), "--- PASS") {
			t.Fatalf("the disk-full dispatch: %v", err)
		}
	}
	body(t)
	if os.Geteuid() == 0 && !testenv.ReRun() && !t.Failed() {
		testenv.RunAsUser(t, testenv.NobodyUID, testenv.NobodyGID)
	}
}

func diskFullDispatch(t *testing.T, dir string) error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make the mounts private: %w", err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size=16k,mode=0700"); err != nil {
		return fmt.Errorf("mount the tiny tmpfs: %w", err)
	}
	path := filepath.Join(dir, "effects.jsonl")
	l, err := ledger.Open(path)
	if err != nil {
		return err
	}
	defer l.Close()
	filler := filepath.Join(dir, "filler")
	// The tool takes every free page of the ledger's disk, then succeeds.
	fill := `dd if=/dev/zero of=` + filler + ` bs=4096 2>/dev/null; echo '{"filled":true}'`
	p, err := subprocess.New(subprocess.WithCommand("/bin/sh", "-c", fill), subprocess.WithWorkdirBase(t.TempDir()), subprocess.WithLedger(l))
	if err != nil {
		return err
	}
	// Each row that no longer fits in the ledger's last page fails; which
	// one that is depends on where the rows end, so the run id's length
	// varies until an outcome append is the one that fails.
	var outcomeErr *executor.Error
	for i := 0; i < 300 && outcomeErr == nil; i++ {
		req := request(fmt.Sprintf("filler%d", i))
		req.RunID = strings.Repeat("r", 1+i*37%400)
		_, err := dispatch(p, req)
		var e *executor.Error
		switch {
		case err == nil:
		case !errors.As(err, &e) || e.Code != executor.CodeLedger:
			return fmt.Errorf("a dispatch on the full disk: %v (%T), want an *executor.Error with code ledger", err, err)
		case strings.Contains(e.Message, "outcome was not recorded"):
			outcomeErr = e
		case !strings.Contains(e.Message, "intent write failed"):
			return fmt.Errorf("the ledger error does not say which row failed: %s", e.Message)
		}
	}
	if outcomeErr == nil {
		return errors.New("no outcome append failed on the full disk")
	}
	e := outcomeErr
	t.Logf("on the full disk: %s", e.Message)
	if err := os.Remove(filler); err != nil {
		return err
	}
	ok, err := subprocess.New(subprocess.WithCommand("/bin/sh", "-c", `echo '{}'`), subprocess.WithWorkdirBase(t.TempDir()), subprocess.WithLedger(l))
	if err != nil {
		return err
	}
	if _, err := dispatch(ok, request("after")); err != nil {
		return fmt.Errorf("a dispatch once space is back: %w", err)
	}
	res, err := ledger.Scan(path)
	if err != nil {
		return fmt.Errorf("scan after the full disk (a corrupt file is exit 2 for moat ledger scan): %w", err)
	}
	if len(res.Orphans) == 0 {
		return errors.New("no orphaned intent: the lost outcome does not show")
	}
	t.Logf("scan: %d intents, %d outcomes, %d orphans", len(res.Intents), len(res.Outcomes), len(res.Orphans))
	return nil
}
