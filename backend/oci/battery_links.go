package oci

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/wovyr/wovyr/agent"
	"github.com/wovyr/wovyr/battery"
	"github.com/wovyr/wovyr/image"
	"github.com/wovyr/wovyr/sandbox"
)

// hostCanary makes a host file outside every sandbox holding a fresh
// marker; links pointing at it must never be followed by the host.
func hostCanary() (dir, file, marker string, cleanup func(), err error) {
	dir, err = os.MkdirTemp("", "wovyr-canary-")
	if err != nil {
		return "", "", "", nil, err
	}
	marker = "wovyr-mark-" + sandbox.NewID()[:12]
	file = filepath.Join(dir, "secret")
	if err := os.WriteFile(file, []byte(marker), 0o644); err != nil {
		os.RemoveAll(dir)
		return "", "", "", nil, err
	}
	return dir, file, marker, func() { os.RemoveAll(dir) }, nil
}

// probeLinks is row 14: the workload plants absolute, relative and
// directory symlinks to a host canary and tries a hard link to it; the
// host collects them all and must return none of the canary's bytes.
func probeLinks(ctx context.Context, t battery.Target) battery.Observation {
	obs := battery.Observation{Tried: "symlinks (absolute, ../.., via a linked dir) and a hard link to a host canary; host Collects them"}
	dir, file, marker, cleanup, err := hostCanary()
	if err != nil {
		obs.Observed = err.Error()
		return obs
	}
	defer cleanup()
	s, err := prepared(ctx, t)
	if err != nil {
		obs.Observed = err.Error()
		return obs
	}
	defer s.Destroy(context.WithoutCancel(ctx))
	inv := shell(t, fmt.Sprintf(`ln -s %[1]s abs; ln -s ../../../../../../../..%[1]s rel; ln -s %[2]s dir; ln %[1]s hard 2>/dev/null && echo HARDLINKED; echo end`, file, dir))
	inv.Workload.Collect = []string{"abs", "rel", "dir/secret", "hard"}
	res, err := s.Run(ctx, inv)
	if err != nil {
		obs.Observed = err.Error()
		return obs
	}
	var leaked []string
	for _, f := range res.Files {
		if bytes.Contains(f.Data, []byte(marker)) {
			leaked = append(leaked, f.Path)
		}
	}
	out := strings.TrimSpace(string(res.Stdout))
	obs.Observed = fmt.Sprintf("inside %q; %d files collected; canary bytes in %v", out, len(res.Files), leaked)
	obs.Secure = res.Class == sandbox.OK && out == "end" && len(leaked) == 0
	return obs
}

// probeExchangeRace is row 15: the workload swaps a regular file and a
// symlink to a host canary with renameat2(RENAME_EXCHANGE) in a loop while
// the host collects the file over and over; the canary is never returned.
func probeExchangeRace(ctx context.Context, t battery.Target) battery.Observation {
	obs := battery.Observation{Tried: "renameat2(RENAME_EXCHANGE) file<->symlink-to-host-canary for 1.5 s while the host Collects the file in a loop"}
	_, file, marker, cleanup, err := hostCanary()
	if err != nil {
		obs.Observed = err.Error()
		return obs
	}
	defer cleanup()
	s, err := prepared(ctx, t)
	if err != nil {
		obs.Observed = err.Error()
		return obs
	}
	defer s.Destroy(context.WithoutCancel(ctx))
	guest := strings.Join(t.Guest, " ")
	inv := shell(t, fmt.Sprintf(`echo safe > f && ln -s %s l && touch go && exec %s exchange f l 1500`, file, guest))
	var (
		res    *sandbox.Result
		runErr error
		wg     sync.WaitGroup
	)
	done := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(done)
		res, runErr = s.Run(ctx, inv)
	}()
	collects, safe, leaks := 0, 0, 0
	goFile := filepath.Join(s.dir, "rootfs", workDir, "go")
	for loop := true; loop; {
		select {
		case <-done:
			loop = false
			continue
		default:
		}
		if _, err := os.Stat(goFile); err != nil {
			time.Sleep(time.Millisecond)
			continue // the race has not begun
		}
		files, err := s.collect([]string{"f"}, s.limits)
		collects++
		for _, f := range files {
			switch {
			case bytes.Contains(f.Data, []byte(marker)):
				leaks++
			case string(f.Data) == "safe\n":
				safe++
			}
		}
		_ = err
	}
	wg.Wait()
	if runErr != nil {
		obs.Observed = runErr.Error()
		return obs
	}
	obs.Observed = fmt.Sprintf("%d collects during the race: %d returned the file, %d the canary; racer %s", collects, safe, leaks, strings.TrimSpace(string(res.Stdout)))
	// The race must really have run: swaps made, and collects both
	// before and between them.
	obs.Secure = res.Class == sandbox.OK && leaks == 0 && safe > 0 && collects > 50 && strings.Contains(string(res.Stdout), `"count":`)
	return obs
}

func fileHash(p string) string {
	f, err := os.Open(p)
	if err != nil {
		return "unreadable: " + err.Error()
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "unreadable: " + err.Error()
	}
	return fmt.Sprintf("%x", h.Sum(nil))[:16]
}

// probeRuntimeOverwrite is row 18 (CVE-2019-5736): the workload tries to
// open for writing every host binary it can reach — /proc/1/exe and the
// files mounted under /.wovyr — without writing a byte; the host checks the
// runtime's, the agent's and the template's busybox hashes before and
// after. /proc/1/exe is the agent in a pooled sandbox, but the workload
// itself in a one-shot gVisor sandbox (the container's init): that is the
// sandbox's own copy of a template file, which newer runsc opens for
// writing (Linux says ETXTBSY) and which a write copies up into the
// sandbox's scratch, so an open that resolves outside /.wovyr is not a
// reach into the host as long as the template stays unchanged.
func probeRuntimeOverwrite(ctx context.Context, t battery.Target) battery.Observation {
	obs := battery.Observation{Tried: "open /proc/1/exe and /.wovyr/* for writing (O_APPEND, nothing written); host hashes the runtime, agent and template binaries"}
	s, err := prepared(ctx, t)
	if err != nil {
		obs.Observed = err.Error()
		return obs
	}
	defer s.Destroy(context.WithoutCancel(ctx))
	hashes := func() string {
		return fileHash(s.d.path) + " " + fileHash(s.b.agent) + " " + fileHash(filepath.Join(image.RootFS(s.b.imagesDir(), s.image), "bin", "busybox"))
	}
	before := hashes()
	res, err := s.Run(ctx, shell(t, `for f in /proc/1/exe /.wovyr/*; do (exec 3>>"$f") 2>/dev/null && echo "OPENED $f $(readlink -f "$f")"; done; echo end`))
	if err != nil {
		obs.Observed = err.Error()
		return obs
	}
	after := hashes()
	out := strings.TrimSpace(string(res.Stdout))
	obs.Observed = fmt.Sprintf("inside %q; %s, agent and template busybox hashes %s -> %s", out, s.d.path, before, after)
	lines := strings.Split(out, "\n")
	reached := slices.ContainsFunc(lines[:len(lines)-1], func(l string) bool {
		f := strings.Fields(l)
		return len(f) != 3 || f[0] != "OPENED" || f[2] == "/.wovyr" || strings.HasPrefix(f[2], "/.wovyr/")
	})
	obs.Secure = res.Class == sandbox.OK && lines[len(lines)-1] == "end" && !reached && before == after && !strings.Contains(before, "unreadable")
	return obs
}

// probeToolHijack is row 22: the workload replaces /bin/true, /bin/sh and
// other tools with scripts that leave a mark in the workspace; after the
// job the host pings the agent and reads the workspace. No host process
// may have run a tenant file (the host never execs into a sandbox: every
// process there is the agent's child).
func probeToolHijack(ctx context.Context, t battery.Target) battery.Observation {
	obs := battery.Observation{Tried: "replace /bin/{true,sh,ls,cat,ps,kill,mount,umount} with mark-leaving scripts; host pings the agent after the job"}
	s, err := started(ctx, t)
	if err != nil {
		obs.Observed = err.Error()
		return obs
	}
	defer s.Destroy(context.WithoutCancel(ctx))
	res, err := s.Run(ctx, shell(t, `for b in true sh ls cat ps kill mount umount; do rm -f /bin/$b && printf '#!/bin/busybox sh\necho "$0 $(id -u)" >> /workspace/hijacked\n' > /bin/$b && /bin/busybox chmod 755 /bin/$b || echo FAILED $b; done; echo end`))
	if err != nil {
		obs.Observed = err.Error()
		return obs
	}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	_, perr := s.client.Do(pctx, agent.Job{ID: "ping"})
	cancel()
	mark, _ := os.ReadFile(filepath.Join(s.dir, "rootfs", workDir, "hijacked"))
	out := strings.TrimSpace(string(res.Stdout))
	obs.Observed = fmt.Sprintf("inside %q; agent ping err=%v; marks %q", out, perr, strings.TrimSpace(string(mark)))
	obs.Secure = res.Class == sandbox.OK && out == "end" && len(mark) == 0
	return obs
}
