package main

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/conformance/testenv"
	"github.com/moat-sandbox/moat/nsexec"
)

// Where user.max_user_namespaces is 0, `moat run --allow-host` runs in
// no-userns and its tool reaches the allowed name through the proxy's
// loopback port of its own, named in http_proxy; an unlisted name is the
// proxy's 403, which moat's stderr repeats. Below Landlock ABI 4 (the VM's 2 refuses the rung itself)
// the run is refused with 125 naming the ABIs.
func TestMoatRunAllowHostWithoutUserNS(t *testing.T) {
	if testenv.InNoUserNS(t) {
		return
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintf(w, "hello from %s", r.Host) }))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	run := func(name string) result {
		t.Helper()
		args := []string{"run", "--log-format", "human", "--allow-host", "api.test", "--allow-cidr", "127.0.0.1/32", "--",
			"/bin/sh", "-c", `echo "$http_proxy"; curl -sS http://` + name + ":" + u.Port() + "/"}
		cmd := exec.Command(moatBin(t), args...)
		cmd.Dir = os.TempDir()
		cmd.Env = append(os.Environ(), egressNamesVar+"=api.test=127.0.0.1,other.test=127.0.0.1")
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		return exitResult(t, cmd.Run(), args, &out, &errb)
	}
	r := run("api.test")
	if abi := nsexec.LandlockABI(); abi < nsexec.NoUserNSEgressABI {
		if r.code != exitSandbox || !strings.Contains(r.stderr, "ABI "+strconv.Itoa(abi)) {
			t.Fatalf("Landlock ABI %d: exit %d, %q; want 125 naming the ABIs", abi, r.code, r.stderr)
		}
		return
	}
	if r.code != 0 || !strings.HasPrefix(r.stdout, "http://127.0.0.1:") || strings.HasPrefix(r.stdout, "http://127.0.0.1:3128\n") ||
		!strings.HasSuffix(r.stdout, "hello from api.test:"+u.Port()) || !strings.Contains(r.stderr, "warning: mode no-userns") {
		t.Fatalf("allowed name in no-userns: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if r = run("other.test"); !strings.Contains(r.stdout, "moat egress denied other.test:"+u.Port()) || !strings.Contains(r.stderr, "egress denied: other.test") {
		t.Fatalf("unlisted name in no-userns: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
}
