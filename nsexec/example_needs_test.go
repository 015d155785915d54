//go:build linux

package nsexec_test

import "github.com/moat-sandbox/moat/conformance/testenv"

// The example starts a real sandbox: where this host cannot, TestMain
// skips it and says why.
func init() { testenv.ExamplesNeed("^Example", testenv.UserNamespaces) }
