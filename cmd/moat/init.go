package main

import "github.com/moat-sandbox/moat/nsexec"

// initSandbox turns this process into the sandbox init when it was started
// as one; the native sandbox lands with nsexec and replaces this with
// nsexec.Init().
func initSandbox() { nsexec.Init() }
