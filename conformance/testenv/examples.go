package testenv

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
)

// An Example cannot call t.Skip: it runs and its output must match, or it
// fails. So an example that needs what a host may lack (user namespaces,
// an interpreter) is declared with ExamplesNeed, and the package's TestMain
// calls SkipExamples just before m.Run, which puts the examples whose need
// is missing into -test.skip (honoured for examples since Go 1.21,
// go.dev/issue/61482) and prints why, as a skipped test says why. The
// standard library leaves such examples without an Output comment
// (compiled, never run); these run wherever they can.

type exampleNeed struct {
	pattern string
	need    func() error
}

var exampleNeeds []exampleNeed

// ExamplesNeed declares that the package's examples matching pattern (a
// -test.skip pattern such as "^Example" or "^ExampleNew$") need what need
// probes for; need returns why this host lacks it, or nil. Call it from an
// init function of the example file.
func ExamplesNeed(pattern string, need func() error) {
	exampleNeeds = append(exampleNeeds, exampleNeed{pattern, need})
}

// SkipExamples is for TestMain, just before m.Run: it skips the examples
// whose need (ExamplesNeed) this host lacks, saying why on stderr. With
// MOAT_REQUIRE_ALL=1 it skips none: they run and fail, as every capability
// skip fails then.
func SkipExamples() {
	if len(exampleNeeds) == 0 {
		return
	}
	if !flag.Parsed() {
		flag.Parse() // m.Run parses only once; the testing flags are registered by now
	}
	skip := flag.Lookup("test.skip")
	for _, e := range exampleNeeds {
		err := e.need()
		if err == nil {
			continue
		}
		if RequireAll() {
			fmt.Fprintf(os.Stderr, "testenv: the examples %s run although a capability is missing (%s=1): %v\n", e.pattern, RequireAllVar, err)
			continue
		}
		fmt.Fprintf(os.Stderr, "testenv: skipping the examples %s, capability missing: %v\n", e.pattern, err)
		// -test.skip is split at '/' into one pattern per subtest level;
		// an example is a top-level name, so an alternation of level-0
		// patterns keeps what the caller asked to skip.
		if cur := skip.Value.String(); cur != "" && !strings.Contains(cur, "/") {
			skip.Value.Set(cur + "|" + e.pattern)
		} else if cur == "" {
			skip.Value.Set(e.pattern)
		}
	}
}

// UserNamespaces reports why this host cannot create the namespaces a
// sandbox is made of (user, mount, pid, net, ipc and uts), or nil: it
// starts true(1) in new ones, mapping this process's own ids to root.
func UserNamespaces() error {
	path, err := exec.LookPath("true")
	if err != nil {
		return fmt.Errorf("no true(1) to start in new namespaces: %w", err)
	}
	cmd := exec.Command(path)
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS | syscall.CLONE_NEWPID |
			syscall.CLONE_NEWNET | syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Geteuid(), Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getegid(), Size: 1}},
	}
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("start a process in new user, mount, pid, net, ipc and uts namespaces: %w", err)
	}
	return nil
}

// Command reports, as a need for ExamplesNeed, whether name is on PATH.
func Command(name string) func() error {
	return func() error {
		_, err := exec.LookPath(name)
		return err
	}
}
