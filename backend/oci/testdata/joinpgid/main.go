// Command joinpgid is a test helper (built by the tests, never shipped): a
// foreground leftover that tries to hide in a background process's group.
// It calls setpgid(0, PGID), writes the outcome to the file OUT, then leaves
// its job's process group for a session of its own (so that only the sweep
// can end it), writes its pid to OUT.pid, and sleeps.
package main

import (
	"fmt"
	"os"
	"strconv"
	"syscall"
	"time"
)

func main() {
	pgid, err := strconv.Atoi(os.Args[1])
	if err != nil {
		os.Exit(2)
	}
	res := "joined"
	if err := syscall.Setpgid(0, pgid); err != nil {
		res = err.Error()
	}
	os.WriteFile(os.Args[2], []byte(res+"\n"), 0o644)
	if _, err := syscall.Setsid(); err != nil {
		os.Exit(3)
	}
	os.WriteFile(os.Args[2]+".pid", []byte(fmt.Sprint(os.Getpid())), 0o644)
	time.Sleep(time.Hour)
}
