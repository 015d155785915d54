package ledger

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/moat-sandbox/moat/conformance/testenv"
	"golang.org/x/sys/unix"
)

// runDiskFull is the helper of TestDiskFullNeverGluesRows, in a private
// mount namespace: a 16 KiB tmpfs at dir holds the ledger and a filler that
// takes every free page, as a tool filling the disk would. Appends go on
// until they fail (the first one short, into the ledger's last partial
// page), a few more fail, the filler goes, and appends must succeed again;
// the file must then scan without a corrupt line.
func runDiskFull(dir string) error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make the mounts private: %w", err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size=16k,mode=0700"); err != nil {
		return fmt.Errorf("mount the tiny tmpfs: %w", err)
	}
	path := filepath.Join(dir, "effects.jsonl")
	l, err := Open(path, WithNow(func() Millis { return 1 }))
	if err != nil {
		return err
	}
	ctx := context.Background()
	pair := func(i int) error {
		in := intentFor(fmt.Sprintf("key-%d", i), fmt.Sprintf("attempt-%d", i), Millis(i))
		if err := l.Intent(ctx, in); err != nil {
			return err
		}
		return l.Record(ctx, recordFor(in, OutcomeOK))
	}
	for i := range 3 {
		if err := pair(i); err != nil {
			return fmt.Errorf("append before the disk is full: %w", err)
		}
	}
	filler, err := os.Create(filepath.Join(dir, "filler"))
	if err != nil {
		return err
	}
	page := make([]byte, 4096)
	for {
		if _, err := filler.Write(page); err != nil {
			break
		}
	}
	filler.Close()
	failed, short := 0, false
	for i := 3; i < 200 && failed < 4; i++ {
		err := pair(i)
		if err == nil {
			continue
		}
		if !errors.Is(err, syscall.ENOSPC) && !strings.Contains(err.Error(), "short write") {
			return fmt.Errorf("append on a full disk failed with %v, want ENOSPC or a short write", err)
		}
		if strings.Contains(err.Error(), "short write") {
			short = true
		}
		failed++
	}
	if failed == 0 {
		return errors.New("no append failed on the full disk")
	}
	if !short {
		return errors.New("no append was short: the check proves nothing about glued rows")
	}
	if err := os.Remove(filepath.Join(dir, "filler")); err != nil {
		return err
	}
	for i := 500; i < 503; i++ {
		if err := pair(i); err != nil {
			return fmt.Errorf("append once space is back: %w", err)
		}
	}
	l.Close()
	res, err := Scan(path)
	if err != nil {
		return fmt.Errorf("scan after the full disk: %w", err)
	}
	fmt.Printf("ok intents=%d outcomes=%d orphans=%d\n", len(res.Intents), len(res.Outcomes), len(res.Orphans))
	return nil
}

// TestDiskFullNeverGluesRows: appends that fail or are cut short on a full
// disk never glue two rows into one line; the writer repairs its own tail
// before its next append, and the file scans clean (what was lost shows as
// orphaned intents), as root and as nobody.
func TestDiskFullNeverGluesRows(t *testing.T) {
	body := func(t *testing.T) {
		dir := t.TempDir()
		cmd := helperCmd(t, "diskfull", helperPath+"="+dir)
		cmd.Stderr = nil
		cmd.SysProcAttr = testenv.PrivateMounts()
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("disk-full helper: %v\n%s", err, out)
		}
		if !strings.HasPrefix(string(out), "ok ") {
			t.Fatalf("disk-full helper: %s", out)
		}
		t.Logf("%s", out)
	}
	body(t)
	if os.Geteuid() == 0 && !testenv.ReRun() && !t.Failed() {
		testenv.RunAsUser(t, testenv.NobodyUID, testenv.NobodyGID)
	}
}
