//go:build linux

package nsexec_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/moat-sandbox/moat/nsexec"
)

// A command run in a sandbox of its own, with stdio passed through: the
// layer under the providers (native.Provider.Run does this under a
// policy's mounts, limits and seccomp filter). The sandbox is a re-exec
// of this binary, so main calls nsexec.Init first (TestMain has, here).
func ExampleStart() {
	work, err := os.MkdirTemp("", "moat-example-work-") // bound read-write at /work
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(work)
	stdin, feed, err := os.Pipe()
	if err != nil {
		log.Fatal(err)
	}
	go func() { fmt.Fprintln(feed, "hello"); feed.Close() }()

	p, err := nsexec.Start(context.Background(), &nsexec.Config{
		Args:    []string{"/bin/sh", "-c", `tr a-z A-Z; echo "uid $(id -u) on $(hostname), in $PWD"; exit 3`},
		Env:     []string{"PATH=/usr/bin:/bin"},
		Workdir: work,
	}, nsexec.Stdio{Stdin: stdin, Stdout: os.Stdout, Stderr: os.Stderr})
	stdin.Close() // the sandbox has its own copy
	if err != nil {
		log.Fatal(err) // a *nsexec.SetupError names the step, the errno and a hint
	}
	exit, err := p.Wait()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("exit status", exit.Code)
	// Output:
	// HELLO
	// uid 1000 on moat, in /work
	// exit status 3
}
