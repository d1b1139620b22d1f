package microvm

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/wovyr/wovyr/sandbox"
)

// TestWarmVMOutlivesExitedThreads is the regression for a warm VM killed
// while it waited for its claim ("send job: write unix: broken pipe" on the
// next claim, issue #25 item 9): QEMU's Pdeathsig followed the OS thread
// that forked it, and goroutines elsewhere in wovyr end threads on purpose
// (LockOSThread, then return: a gVisor sandbox born on one CPU). Here 64
// such goroutines run between Prepare and the claim.
func TestWarmVMOutlivesExitedThreads(t *testing.T) {
	b := sibling(t, backend(t), func(c *Config) { c.Warm = true })
	ctx := context.Background()
	s, err := b.Prepare(ctx, sandbox.Template{Kind: sandbox.KindCommand})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy(ctx)
	for range 64 {
		ch := make(chan struct{})
		go func() { runtime.LockOSThread(); close(ch) }()
		<-ch
	}
	time.Sleep(100 * time.Millisecond)
	res, err := s.Run(ctx, inv("/bin/echo", "alive"))
	if err != nil || res.ExitCode != 0 || string(res.Stdout) != "alive\n" {
		t.Fatalf("claim after threads exited: %+v, %v", res, err)
	}
}
