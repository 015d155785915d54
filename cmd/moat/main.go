// Command moat runs untrusted tool programs in a rootless Linux sandbox.
//
//	moat run [flags] -- CMD [ARG...]        run a command in the sandbox, stdio passed through
//	moat dispatch --tool NAME [flags] -- CMD  one full provider dispatch (protocol + ledger)
//	moat ledger scan FILE...                 reconcile effect ledgers
//	moat policy list|show|check              inspect sandbox policies
//	moat version                             build and library versions
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
)

// Exit statuses shared by the subcommands.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 64  // EX_USAGE: bad flags or arguments
	exitSandbox = 125 // the sandbox could not be set up (as docker/podman run)
)

// command is one subcommand: it gets its arguments and the output streams and
// returns the process exit status.
type command struct {
	summary string
	run     func(args []string, stdout, stderr io.Writer) int
}

var commands = map[string]command{
	"demo":     {"one sandboxed dispatch of an untrusted snippet, with its ledger rows", demoCmd},
	"ledger":   {"scan effect ledgers for orphaned intents and corruption", ledgerCmd},
	"policy":   {"list, show and check sandbox policies", policyCmd},
	"run":      {"run a command in a fresh sandbox, stdio passed through", runCmd},
	"doctor":   {"what this host allows and what moat enforces here, with fixes", doctorCmd},
	"dispatch": {"one full provider dispatch: protocol, ledger, typed errors", dispatchCmd},
	"version":  {"print moat's version and build facts", versionCmd},
}

func main() {
	initSandbox()
	exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "moat: unknown command %q\n\n", args[0])
		usage(stderr)
		return exitUsage
	}
	return c.run(args[1:], stdout, stderr)
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "moat runs untrusted tool programs in a rootless Linux sandbox.\n\nUsage: moat COMMAND [flags]\n\nCommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-9s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nRun 'moat COMMAND --help' for a command's flags.")
}

// parseFlags parses a subcommand's flags; done reports that the command
// ends here, with status (0 after --help, 64 for a bad flag, which the flag
// package has already explained).
func parseFlags(fs *flag.FlagSet, args []string) (status int, done bool) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK, true
		}
		return exitUsage, true
	}
	return 0, false
}

// usageErrorf returns a printer of "moat CMD: reason" that yields exit 64.
func usageErrorf(stderr io.Writer, cmd string) func(format string, a ...any) int {
	return func(format string, a ...any) int {
		fmt.Fprintf(stderr, "moat "+cmd+": "+format+"\n", a...)
		return exitUsage
	}
}
