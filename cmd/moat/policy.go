package main

import (
	"errors"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/moat-sandbox/moat/policies"
)

const policyUsage = `usage:
  moat policy list              the built-in policies
  moat policy show NAME|FILE    the resolved policy, as JSON
  moat policy check FILE        validate a policy file (exit 0 valid, 1 invalid)
`

// policyCmd implements `moat policy list|show|check`.
func policyCmd(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, policyUsage)
		return exitUsage
	}
	switch sub, rest := args[0], args[1:]; {
	case sub == "-h" || sub == "--help" || sub == "help":
		fmt.Fprint(stdout, policyUsage)
		return exitOK
	case sub == "list" && len(rest) == 0:
		return policyList(stdout, stderr)
	case sub == "show" && len(rest) == 1:
		return policyShow(rest[0], stdout, stderr)
	case sub == "check" && len(rest) == 1:
		return policyCheck(rest[0], stdout, stderr)
	}
	fmt.Fprintf(stderr, "moat policy: bad arguments %q\n%s", args, policyUsage)
	return exitUsage
}

func policyList(stdout, stderr io.Writer) int {
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	for _, name := range policies.Builtins() {
		p, err := policies.Builtin(name)
		if err != nil {
			fmt.Fprintf(stderr, "moat policy list: %v\n", err)
			return exitFailure
		}
		fmt.Fprintf(tw, "%s\t%s\n", name, p.Description)
	}
	if err := tw.Flush(); err != nil {
		fmt.Fprintf(stderr, "moat policy list: %v\n", err)
		return exitFailure
	}
	return exitOK
}

func policyShow(nameOrPath string, stdout, stderr io.Writer) int {
	p, err := policies.Load(nameOrPath)
	if err != nil {
		printPolicyError(stderr, "moat policy show", err)
		return exitFailure
	}
	b, err := p.MarshalIndent()
	if err != nil {
		fmt.Fprintf(stderr, "moat policy show: %v\n", err)
		return exitFailure
	}
	if _, err := stdout.Write(b); err != nil {
		return exitFailure
	}
	return exitOK
}

func policyCheck(path string, stdout, stderr io.Writer) int {
	p, err := policies.Load(path)
	if err != nil {
		printPolicyError(stderr, "moat policy check "+path, err)
		return exitFailure
	}
	digest, err := p.Digest()
	if err != nil {
		fmt.Fprintf(stderr, "moat policy check %s: %v\n", path, err)
		return exitFailure
	}
	fmt.Fprintf(stdout, "%s: valid (%s)\n", path, digest)
	if p.Unfiltered {
		fmt.Fprintln(stderr, unfilteredWarning("moat policy check "+path, p))
	}
	return exitOK
}

// unfilteredWarning is the one line said wherever a policy that states
// "unfiltered": true is checked or run.
func unfilteredWarning(prefix string, p *policies.Policy) string {
	return fmt.Sprintf(`%s: warning: policy %q runs the tool with no seccomp filter ("unfiltered": true): `+
		`every system call reaches the kernel`, prefix, p.Name)
}

// printPolicyError prints one line per field error when there are any (so a
// user sees every problem at once), else the error itself.
func printPolicyError(w io.Writer, prefix string, err error) {
	fes := policies.FieldErrors(err)
	var nf *policies.NotFoundError
	switch {
	case len(fes) > 0:
		fmt.Fprintf(w, "%s: %d problem(s):\n", prefix, len(fes))
		for _, fe := range fes {
			fmt.Fprintf(w, "  %s\n", fe)
		}
	case errors.As(err, &nf):
		fmt.Fprintf(w, "%s: %v\n", prefix, nf)
	default:
		fmt.Fprintf(w, "%s: %v\n", prefix, err)
	}
}
