package native_test

import "github.com/moat-sandbox/moat/conformance/testenv"

// The examples start real sandboxes: where this host cannot, TestMain
// (conformance.Main) skips them and says why.
func init() {
	testenv.ExamplesNeed("^Example", testenv.UserNamespaces)
	testenv.ExamplesNeed("^Example(New|WithEgressProxy)$", testenv.Command("python3"))
}
