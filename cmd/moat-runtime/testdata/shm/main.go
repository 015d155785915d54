// Command shm makes and uses a SysV shared memory segment, for the pod
// tests of moat-runtime: "shm create KEY" makes a segment of mode 0600 at
// KEY and writes "made" into it, "shm use KEY" attaches it read-write,
// reads it and writes "used"; each prints what it read, or the errno.
// It is built static (CGO_ENABLED=0) to run in the offline busybox image.
package main

import (
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: shm create|use KEY")
		os.Exit(2)
	}
	key, err := strconv.Atoi(os.Args[2])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	flag, size := 0, 0
	if os.Args[1] == "create" {
		flag, size = unix.IPC_CREAT|unix.IPC_EXCL|0o600, 4096
	}
	id, err := unix.SysvShmGet(key, size, flag)
	if err != nil {
		fmt.Println("shmget:", err)
		os.Exit(1)
	}
	b, err := unix.SysvShmAttach(id, 0, 0)
	if err != nil {
		fmt.Println("shmat:", err)
		os.Exit(1)
	}
	word := "used"
	if os.Args[1] == "create" {
		word = "made"
	}
	fmt.Printf("%s\n", b[:4])
	copy(b, word)
}
