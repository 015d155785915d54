package container_test

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/conformance"
	"github.com/moat-sandbox/moat/executor"
	"github.com/moat-sandbox/moat/executor/container"
	"github.com/moat-sandbox/moat/ledger"
	"golang.org/x/sys/unix"
)

// hostUlimits are --ulimit values of at most 4096, within the host's hard
// limits: podman's defaults (nofile 1048576) exceed them, and the OCI
// runtime cannot raise a hard limit. (The limits that count are those of
// podman's conmon, measured at nproc 32768 here, below this shell's 96365.)
func hostUlimits(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, l := range []struct {
		name string
		res  int
	}{{"nofile", unix.RLIMIT_NOFILE}, {"nproc", unix.RLIMIT_NPROC}} {
		var r unix.Rlimit
		if err := unix.Getrlimit(l.res, &r); err != nil {
			t.Fatal(err)
		}
		n := min(r.Max, 4096)
		out = append(out, fmt.Sprintf("%s=%d:%d", l.name, n, n))
	}
	return out
}

// podmanOptions are the options this host needs: runc (crun refuses hybrid
// cgroups), ulimits within the hard limits, never a pull, and the runner's
// directory bound read-only at its own path.
func podmanOptions(t *testing.T, podman, image, runnerDir string) []container.Option {
	opts := []container.Option{
		container.WithCLI(podman),
		container.WithImage(image),
		container.WithRuntime("runc"),
		container.WithUlimits(hostUlimits(t)...),
		container.WithExtraArgs("--pull=never"),
	}
	if runnerDir != "" {
		opts = append(opts, container.WithExtraArgs("-v", runnerDir+":"+runnerDir+":ro"))
	}
	return opts
}

// testHostID is the first host uid and gid of the containers' id map: far
// from host root, and outside the native provider's range (2000000000 +
// 65536) so the two never share an owner.
const testHostID = 2100000000

// containerGone fails t if podman still knows the container of an attempt.
func containerGone(t *testing.T, podman, attempt string) {
	t.Helper()
	// stdout only: podman warns on stderr about other containers on the
	// host (one whose runtime binary is gone), which are not this one.
	out, err := exec.Command(podman, "ps", "--all", "--quiet", "--filter", "name=^moat-"+attempt+"$").Output()
	if err != nil {
		t.Fatalf("podman ps: %v", err)
	}
	if s := strings.TrimSpace(string(out)); s != "" {
		exec.Command(podman, "rm", "--force", "moat-"+attempt).Run()
		t.Fatalf("container moat-%s survived its dispatch (%s)", attempt, s)
	}
}

// TestPodman runs the container provider for real, against podman and runc
// as root, in an image built offline from the test binary's libraries.
func TestPodman(t *testing.T) {
	podman, image := podmanImage(t)

	// The reference's flags plus no_new_privs and a user namespace of its
	// own: the provider then claims the privilege checks too (i6 to i9).
	t.Run("conformance", func(t *testing.T) {
		conformance.Run(t, func(t *testing.T, cfg conformance.Config) executor.Provider {
			opts := append(podmanOptions(t, podman, image, cfg.RunnerDir),
				container.WithNoNewPrivileges(),
				container.WithIDMap(testHostID, 65536),
				container.WithCommand(cfg.Command, cfg.Args...),
				container.WithForwardEnv(cfg.AllowEnv...),
				container.WithTimeout(cfg.Timeout),
				container.WithMaxOutputBytes(cfg.MaxOutputBytes),
				container.WithCredentials(cfg.Credentials))
			if cfg.Ledger != nil {
				opts = append(opts, container.WithLedger(cfg.Ledger))
			}
			if cfg.KillGrace != nil {
				opts = append(opts, container.WithKillGrace(*cfg.KillGrace))
			}
			p, err := container.New(opts...)
			if err != nil {
				t.Fatalf("container.New: %v", err)
			}
			return p
		}, conformance.WithIsolation(conformance.Isolation{Filesystem: true, Network: true, PIDs: true, Privileges: true}))
	})

	// A tool that ignores SIGTERM outlives the CLI's SIGKILL in its
	// container; the provider must remove it before the dispatch ends.
	for _, stop := range []string{"timeout", "cancel"} {
		t.Run("stubborn container removed on "+stop, func(t *testing.T) {
			runner := runnerCopy(t)
			mem := &ledger.Memory{}
			opts := append(podmanOptions(t, podman, image, runner.dir),
				container.WithCommand(runner.path), container.WithLedger(mem),
				container.WithKillGrace(500*time.Millisecond),
				container.WithCredentials(func(context.Context, *executor.Request) ([]executor.Credential, error) {
					return []executor.Credential{{Name: stubbornVar, Value: "1"}}, nil
				}))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			want := executor.CodeAborted
			if stop == "timeout" {
				opts = append(opts, container.WithTimeout(time.Second))
				want = executor.CodeTimeout
			} else {
				time.AfterFunc(time.Second, cancel)
			}
			p, err := container.New(opts...)
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			_, err = p.Dispatch(ctx, request("stubborn"))
			if executor.CodeOf(err) != want {
				t.Fatalf("err = %v, want code %s", err, want)
			}
			elapsed := time.Since(start)
			rows := mem.Records()
			if len(rows) != 1 {
				t.Fatalf("%d rows", len(rows))
			}
			containerGone(t, podman, rows[0].AttemptID)
			t.Logf("%s: dispatch ended after %v (CLI signal %v, exit %v), container removed", stop, elapsed, deref(rows[0].Signal), derefInt(rows[0].ExitCode))
		})
	}

	// --cap-drop ALL leaves no capability in any set; no_new_privs is not
	// set by the reference's flags (the kit's i6 would need it).
	t.Run("no capabilities", func(t *testing.T) {
		runner := runnerCopy(t)
		p, err := container.New(append(podmanOptions(t, podman, image, runner.dir), container.WithCommand(runner.path))...)
		if err != nil {
			t.Fatal(err)
		}
		res, err := dispatch(p, &executor.Request{Tool: "privs", Args: []byte(`{"behavior":"probe-privs"}`)})
		if err != nil {
			t.Fatal(err)
		}
		for _, set := range []string{"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"} {
			if !strings.Contains(string(res), `"`+set+`":"0000000000000000"`) {
				t.Errorf("%s is not empty inside the container: %s", set, res)
			}
		}
	})

	// Without ulimits, podman either works (a host whose hard limits admit
	// its defaults) or fails with the typed, explained error: never a bare
	// exit 126.
	t.Run("default ulimits diagnosed", func(t *testing.T) {
		runner := runnerCopy(t)
		p, err := container.New(container.WithCLI(podman), container.WithImage(image), container.WithRuntime("runc"),
			container.WithExtraArgs("--pull=never", "-v", runner.dir+":"+runner.dir+":ro"), container.WithCommand(runner.path))
		if err != nil {
			t.Fatal(err)
		}
		_, err = dispatch(p, &executor.Request{Tool: "boot", Args: []byte(`{"behavior":"echo"}`)})
		var se *container.StartError
		switch {
		case err == nil:
			t.Logf("podman's default ulimits fit this host's hard limits")
		case errors.As(err, &se) && se.Cause == container.CauseUlimits && executor.CodeOf(err) == executor.CodeSetup:
			t.Logf("diagnosed: %v", err)
		default:
			t.Fatalf("err = %v, want success or a StartError with cause ulimits", err)
		}
	})
}

func deref(s *string) string {
	if s == nil {
		return "null"
	}
	return *s
}

func derefInt(i *int) string {
	if i == nil {
		return "null"
	}
	return fmt.Sprint(*i)
}
