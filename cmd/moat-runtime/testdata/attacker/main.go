// Command attacker runs moat's hostile syscall table (seccomp/attack)
// inside a container and prints each call's errno as JSON, for the podman
// tests of moat-runtime. It is built static (CGO_ENABLED=0) to run in the
// offline busybox image.
package main

import (
	"encoding/json"
	"os"

	"github.com/moat-sandbox/moat/seccomp/attack"
)

func main() {
	out := map[string]int{}
	for _, p := range attack.Probes() {
		out[p.Name] = int(p.Run())
	}
	json.NewEncoder(os.Stdout).Encode(out)
}
