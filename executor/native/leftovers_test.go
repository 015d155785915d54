package native_test

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/conformance/testenv"
	"github.com/moat-sandbox/moat/executor/native"
)

// Issue 14, "Nothing left behind": Run's fresh workdir goes whatever the
// tool left in it, with the pipeline's own removal. The tool plants links
// to a host directory (its contents 0700) at the top and inside a tree it
// then makes 0500 and 0000, and makes /work itself 0500: the workdir must
// be gone afterwards, the host directory untouched, and no failure logged.
func TestRunRemovesAHostileWorkdir(t *testing.T) {
	if os.Geteuid() == 0 && !testenv.ReRun() {
		t.Run("root", testRunRemovesAHostileWorkdir)
		testenv.RunAsUser(t, testenv.NobodyUID, testenv.NobodyGID)
		return
	}
	testRunRemovesAHostileWorkdir(t)
}

func testRunRemovesAHostileWorkdir(t *testing.T) {
	base := t.TempDir()
	host := filepath.Join(t.TempDir(), "host")
	if err := os.MkdirAll(filepath.Join(host, "inner"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(host, "inner", "secret"), []byte("s"), 0o600); err != nil {
		t.Fatal(err)
	}
	var logb bytes.Buffer
	p, err := native.New(native.WithoutCgroups(), native.WithTimeout(20*time.Second), native.WithWorkdirBase(base),
		native.WithLogger(slog.New(slog.NewTextHandler(&logb, &slog.HandlerOptions{Level: slog.LevelWarn}))))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	script := `set -e; cd /work
ln -s ` + host + ` link
mkdir -p ro/deep none/x
echo f > ro/deep/f
ln -s ` + host + ` ro/link; ln -s ` + host + `/inner ro/deep/link; ln -s ` + host + ` none/x/link
chmod 500 ro/deep ro; chmod 000 none/x none
chmod 500 /work`
	var out bytes.Buffer
	r, w, _ := os.Pipe()
	done := make(chan struct{})
	go func() { out.ReadFrom(r); close(done) }()
	st, err := p.Run(context.Background(), &native.Command{Args: []string{"/bin/sh", "-c", script},
		Env: []string{"PATH=/usr/bin:/bin"}, Stdout: w, Stderr: w})
	w.Close()
	<-done
	if err != nil || st.Code != 0 {
		t.Fatalf("the tool: %v, exit %d: %s", err, st.Code, out.String())
	}
	if ents, _ := os.ReadDir(base); len(ents) != 0 {
		t.Fatalf("the workdir base holds %v after the run", ents)
	}
	if strings.Contains(logb.String(), "workdir") {
		t.Fatalf("the run logged about its workdir: %s", logb.String())
	}
	for path, mode := range map[string]os.FileMode{host: 0o700, filepath.Join(host, "inner"): 0o700, filepath.Join(host, "inner", "secret"): 0o600} {
		fi, err := os.Lstat(path)
		if err != nil || fi.Mode().Perm() != mode {
			t.Fatalf("the host's %s changed: %v %v", path, fi.Mode(), err)
		}
	}
}
