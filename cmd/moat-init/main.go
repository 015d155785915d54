// Command moat-init is the sandbox init alone: a small static binary that
// the native provider can start (native.WithInitPath) instead of
// re-executing the whole moat binary. It links neither libseccomp nor the
// CLI's packages, so the child skips the dynamic loader and their package
// inits (issue 9: about 1.5 ms of a cold start on the reference host).
//
// Build it without cgo so it is static:
//
//	CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o moat-init ./cmd/moat-init
//
// Run by hand it does nothing and exits 2: only nsexec.Start starts it
// usefully.
package main

import (
	"fmt"
	"os"

	"github.com/moat-sandbox/moat/nsexec"
)

func main() {
	nsexec.Init() // never returns in a sandbox child
	fmt.Fprintln(os.Stderr, "moat-init: this is moat's sandbox init; it is started by moat, not by hand")
	os.Exit(2)
}
