// Command moat-runtime is moat as an OCI runtime: runc's command line
// (create, start, state, kill, delete, run, features), so that podman
// (--runtime), containerd (the runc shim's BinaryName, or ctr
// --runc-binary) and CRI-O run their containers in moat's sandbox.
//
// It is a binary of its own rather than a mode of moat: runc's "run" takes
// a bundle and an ID where moat's takes a command, and an engine names a
// runtime by path, so a separate name keeps both command lines whole.
//
// create spawns the container's sandbox itself (nsexec.Prepare), so that
// the pid an engine is given is the sandbox's init and, once create exits,
// the child of the engine's subreaper, which reaps it and sees the
// container's status; a monitor process of moat-runtime holds the sandbox
// from then on (handoff.go): it starts the process when told to over a
// unix socket in the container's state directory, signals it, has the init
// fork the processes exec asks for (exec.go), and records the end.
package main

import (
	"fmt"
	"os"

	"github.com/moat-sandbox/moat/nsexec"
)

func main() {
	nsexec.Init() // in a sandbox init this never returns
	os.Exit(run(os.Args[1:]))
}

// Exit statuses of the runtime's own failures (runc exits 1).
const (
	exitFail  = 1
	exitUsage = 2
)

func run(args []string) int {
	g, rest, err := parseGlobal(args)
	if err != nil {
		fmt.Fprintf(os.Stderr, "moat-runtime: %v\n", err)
		return exitUsage
	}
	if len(rest) == 0 {
		fmt.Fprint(os.Stderr, usage)
		return exitUsage
	}
	cmd, cargs := rest[0], rest[1:]
	switch cmd {
	case monitorCommand:
		return monitorMain(g, cargs)
	case waiterCommand:
		return waiterMain(cargs)
	}
	r := &runtime{global: g}
	r.log = openLog(g)
	defer r.log.close()
	var fn func([]string) error
	switch cmd {
	case "create":
		fn = r.create
	case "start":
		fn = r.start
	case "run":
		fn = r.runCmd
	case "state":
		fn = r.state
	case "kill":
		fn = r.kill
	case "delete":
		fn = r.delete
	case "features":
		fn = r.features
	case "list":
		fn = r.list
	case "exec":
		fn = r.execCmd
	case "ps":
		fn = r.ps
	case "pause":
		fn = r.pause
	case "resume":
		fn = r.resume
	case "events":
		fn = r.events
	case "update":
		fn = r.update
	case "checkpoint", "restore", "spec":
		err = fmt.Errorf("%s is not supported by moat-runtime (see the README's OCI section)", cmd)
	case "--version", "-v", "version":
		fmt.Printf("moat-runtime version 0.1\nspec: 1.2.0\n")
		return 0
	case "--help", "-h", "help":
		fmt.Print(usage)
		return 0
	default:
		err = fmt.Errorf("unknown command %q", cmd)
	}
	if err == nil {
		err = fn(cargs)
	}
	if err != nil {
		if code, ok := err.(exitCode); ok {
			return int(code)
		}
		r.log.error(err)
		return exitFail
	}
	return 0
}

// exitCode is a command's own exit status that is no failure of the
// runtime (run's container status).
type exitCode int

func (e exitCode) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

const usage = `usage: moat-runtime [--root DIR] [--log FILE] [--log-format text|json] COMMAND [ARGS]

commands (runc's):
  create --bundle DIR [--pid-file FILE] [--console-socket SOCK] ID
  start ID
  run --bundle DIR [--pid-file FILE] [--console-socket SOCK] [--detach] ID
  state ID
  kill [--all] ID [SIGNAL]
  exec [--process FILE] [--tty] [--console-socket SOCK] [--detach] [--pid-file FILE]
       [--cwd DIR] [--env K=V]... [--user UID[:GID]] [--cap CAP]... ID [COMMAND...]
  delete [--force] ID
  ps [--format table|json] ID [PS-ARGS...]
  pause ID
  resume ID
  events [--stats] [--interval D] ID
  update [--resources FILE|-] [--memory N] [--memory-swap N] [--pids-limit N]
         [--cpu-quota N] [--cpu-period N] [--cpu-share N] ID
  list
  features
`
