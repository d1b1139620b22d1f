// Command wovyr-guest is the static binary wovyr places inside sandboxes: the
// job agent (a container's or microVM's init) and the battery's in-sandbox
// prober. Build it with CGO_ENABLED=0 so it runs in any root filesystem.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/wovyr/wovyr/agent"
	"github.com/wovyr/wovyr/battery/prober"
)

func main() {
	if os.Args[0] == "/init" { // the kernel starts a microVM's initramfs init without arguments
		os.Args = []string{os.Args[0], "init"}
	}
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: wovyr-guest agent [--device PATH] | init | job [--nproc N] -- PROG ARGV... | probe … | now [--sleep D]")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	switch os.Args[1] {
	case "agent":
		os.Exit(agentMain(ctx, os.Args[2:]))
	case "init":
		os.Exit(initMain(ctx))
	case "job":
		os.Exit(jobMain(os.Args[2:]))
	case "probe":
		os.Exit(prober.Main(os.Args[2:], os.Stdout))
	case "now":
		os.Exit(nowMain(os.Args[2:]))
	default:
		fmt.Fprintf(os.Stderr, "wovyr-guest: unknown command %q\n", os.Args[1])
		os.Exit(2)
	}
}

// nowMain prints the wall clock in nanoseconds since the epoch, then
// sleeps: the process the live-output benchmarks watch (the time from its
// write to a client's receipt; busybox's date has no nanoseconds).
func nowMain(args []string) int {
	fs := flag.NewFlagSet("now", flag.ContinueOnError)
	sleep := fs.Duration("sleep", 0, "how long to sleep after printing")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	fmt.Println(time.Now().UnixNano())
	time.Sleep(*sleep)
	return 0
}

// jobMain runs one job as a one-shot container's init: PROG with ARGV
// (argv[0] included) as its child (agent.RunLeader says why).
func jobMain(args []string) int {
	fs := flag.NewFlagSet("job", flag.ContinueOnError)
	nproc := fs.Int("nproc", 0, "the job's RLIMIT_NPROC, this process's threads not counted (0: inherited)")
	stopIsExit := fs.Bool("trace-stop-is-exit", false, "take the job's first ptrace-stop for its end (battery row 94's positive control only)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() < 2 {
		fmt.Fprintln(os.Stderr, "usage: wovyr-guest job [--nproc N] -- PROG ARGV...")
		return 2
	}
	return agent.RunLeader(fs.Arg(0), fs.Args()[1:], *nproc, *stopIsExit)
}

// agentMain serves jobs on stdin/stdout, or on a character device such as a
// virtio-serial port.
func agentMain(ctx context.Context, args []string) int {
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	device := fs.String("device", "", "serve on this device (e.g. a virtio-serial port) instead of stdin/stdout")
	thawed := fs.String(agent.ThawedFlag, "", "answer this Reexec job first (set by the agent's own re-exec after a restore)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	var rw io.ReadWriter = struct {
		io.Reader
		io.Writer
	}{os.Stdin, os.Stdout}
	if *device != "" {
		f, err := os.OpenFile(*device, os.O_RDWR, 0)
		if err != nil {
			fmt.Fprintln(os.Stderr, "wovyr-guest:", err)
			return 1
		}
		defer f.Close()
		rw = f
	}
	if err := agent.Harden(); err != nil {
		fmt.Fprintln(os.Stderr, "wovyr-guest:", err)
		return 1
	}
	agent.ReserveThreads()
	serve := agent.Serve
	if *thawed != "" {
		serve = func(ctx context.Context, rw io.ReadWriter) error { return agent.Resume(ctx, rw, *thawed) }
	}
	if err := serve(ctx, rw); err != nil {
		fmt.Fprintln(os.Stderr, "wovyr-guest:", err)
		return 1
	}
	return 0
}
