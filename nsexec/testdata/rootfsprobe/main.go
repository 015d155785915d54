// The static tool of nsexec's rootfs fixture: it says who and where it is,
// writes /work/out and tries to write the read-only root. The tests build
// it with CGO_ENABLED=0; the VM runner builds it once on the host and hands
// it over in MOAT_NSEXEC_TEST_PROBE (compiling it in the guest under TCG
// took minutes).
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Printf("uid %d ppid %d\n", os.Getuid(), os.Getppid())
	if err := os.WriteFile("/work/out", []byte("rootfs"), 0o644); err != nil {
		fmt.Println("work:", err)
		os.Exit(1)
	}
	if err := os.WriteFile("/x", nil, 0o644); err != nil {
		fmt.Println("root:", err)
	} else {
		fmt.Println("root writable")
	}
}
