package wasm

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/wovyr/wovyr/sandbox"
)

// leaked reports whether the guest's output or collected files hold the canary.
func (e *probeEnv) leaked(res *sandbox.Result) bool {
	if bytes.Contains(res.Stdout, []byte(e.canary)) || bytes.Contains(res.Stdout, []byte("root:x:0:0")) {
		return true
	}
	for _, f := range res.Files {
		if bytes.Contains(f.Data, []byte(e.canary)) {
			return true
		}
	}
	return false
}

func verdict(e *probeEnv, res *sandbox.Result, extra ...string) (string, bool) {
	obs := strings.TrimSpace(strings.ReplaceAll(string(res.Stdout), "\n", "; "))
	if len(res.Files) > 0 {
		obs += fmt.Sprintf("; collected %d file(s)", len(res.Files))
	}
	obs += strings.Join(extra, "")
	switch {
	case !ran(res):
		return "guest did not finish (" + string(res.Class) + " " + res.Error + "): " + obs, false
	case e.leaked(res):
		return "CANARY OR HOST FILE READ: " + obs, false
	}
	return obs, true
}

var probeTraversal = Probe{
	ID: 61, Name: "dot-dot traversal",
	// Control: a preopen grants the host root.
	weakness: WeakHostRoot,
	run: func(ctx context.Context, e *probeEnv) (string, string, bool) {
		b, err := e.workBackend()
		if err != nil {
			return failed(err)
		}
		canary := filepath.Join(b.work, "wovyr-canary-61")
		e.plant(canary)
		paths := []string{"../wovyr-canary-61", "probe/../../wovyr-canary-61",
			"./../../../../../../../../.." + canary, strings.TrimPrefix(canary, "/"), canary,
			"/etc/passwd", "etc/passwd", "../../../../../../../../etc/passwd"}
		g := newWat()
		for fd := 3; fd <= 6; fd++ { // /workspace and any other preopen
			for i, p := range paths {
				g.open(fmt.Sprintf("fd%d.path%d", fd, i), fd, p, 0, wasiRead, lookupFollow)
			}
		}
		res, err := e.runWat(ctx, g.module(), e.work(nil))
		if err != nil {
			return failed(err)
		}
		obs, ok := verdict(e, res)
		return "path_open on every preopen of " + strings.Join(paths, ", "), obs, ok
	},
}

// wideData lays out scratch/data (the preopen) beside scratch/canary. The
// control grants scratch itself (one level too wide) and the guest reaches
// data through "data/"; every path the guest tries is then the same link.
func (e *probeEnv) wideData() (dataDir, guestPrefix string, pre Preopen) {
	s := e.scratchDir()
	dataDir = filepath.Join(s, "data")
	os.Mkdir(dataDir, 0o755)
	if e.cfg.weak.widePreopen {
		return dataDir, "data/", Preopen{Host: s, Guest: "/data"}
	}
	return dataDir, "", Preopen{Host: dataDir, Guest: "/data"}
}

var probeSymlinks = Probe{
	ID: 62, Name: "symlinks out of a preopen",
	weakness: WeakWidePreopen,
	run: func(ctx context.Context, e *probeEnv) (string, string, bool) {
		dataDir, pfx, pre := e.wideData()
		b, err := e.workBackend(pre)
		if err != nil {
			return failed(err)
		}
		e.plant(filepath.Join(e.scratch, "canary"))
		os.Symlink(filepath.Join(e.scratch, "canary"), filepath.Join(dataDir, "abs"))
		os.Symlink("../canary", filepath.Join(dataDir, "rel"))
		outside := filepath.Join(b.work, "wovyr-created-62")
		defer os.Remove(outside)
		g := newWat()
		// Guest-made links out of /workspace (fd 3; unprivileged, a
		// read-only stand-in), then followed, also with O_CREAT and a
		// trailing slash.
		g.call("symlink.rel", "(call $path_symlink "+g.str("../wovyr-canary-62")+" (i32.const 3) "+g.str("l1")+")")
		g.call("symlink.abs", "(call $path_symlink "+g.str(filepath.Join(b.work, "wovyr-canary-62"))+" (i32.const 3) "+g.str("l2")+")")
		g.call("symlink.create", "(call $path_symlink "+g.str("../wovyr-created-62")+" (i32.const 3) "+g.str("l3")+")")
		g.open("follow.l1", 3, "l1", 0, wasiRead, lookupFollow)
		g.open("follow.l2", 3, "l2", 0, wasiRead, lookupFollow)
		g.open("follow.l1slash", 3, "l1/", 0, wasiRead, lookupFollow)
		g.open("creat.l3", 3, "l3", oCreat, wasiRead|wasiWrite, lookupFollow)
		// Host-made links in a read-only preopen (fd 4).
		g.open("host.abs", 4, pfx+"abs", 0, wasiRead, lookupFollow)
		g.open("host.rel", 4, pfx+"rel", 0, wasiRead, lookupFollow)
		e.plant(filepath.Join(b.work, "wovyr-canary-62"))
		res, err := e.runWat(ctx, g.module(), e.work(nil))
		if err != nil {
			return failed(err)
		}
		var extra string
		if _, err := os.Lstat(outside); err == nil {
			extra = "; A FILE WAS CREATED OUTSIDE THE PREOPEN"
		}
		obs, ok := verdict(e, res, extra)
		return "guest path_symlink out of /workspace then follow (plain, O_CREAT, trailing slash); follow host-planted abs/rel links in a read-only preopen", obs, ok && extra == ""
	},
}

var probeLinksCollect = Probe{
	ID: 14, Name: "links collected by the host",
	weakness: WeakFollowLinks,
	run: func(ctx context.Context, e *probeEnv) (string, string, bool) {
		b, err := e.backend()
		if err != nil {
			return failed(err)
		}
		canary := filepath.Join(b.work, "wovyr-canary-14")
		e.plant(canary)
		g := newWat()
		g.call("symlink.abs", "(call $path_symlink "+g.str(canary)+" (i32.const 3) "+g.str("out-abs")+")")
		g.call("symlink.rel", "(call $path_symlink "+g.str("../wovyr-canary-14")+" (i32.const 3) "+g.str("out-rel")+")")
		g.call("link.hard", "(call $path_link (i32.const 3) (i32.const 0) "+g.str("../wovyr-canary-14")+" (i32.const 3) "+g.str("out-hard")+")")
		in := withWork(nil)
		in.Workload.Collect = []string{"out-abs", "out-rel", "out-hard"}
		res, err := e.runWat(ctx, g.module(), in)
		if err != nil {
			return failed(err)
		}
		obs, ok := verdict(e, res)
		return "guest plants symlinks and a hard link to a host canary in /workspace; the host collects them", obs, ok
	},
}

var probeSwapRace = Probe{
	ID: 63, Name: "external swap race",
	weakness: WeakWidePreopen,
	run: func(ctx context.Context, e *probeEnv) (string, string, bool) {
		dataDir, pfx, pre := e.wideData()
		if _, err := e.backend(pre); err != nil {
			return failed(err)
		}
		e.plant(filepath.Join(e.scratch, "canary"))
		f := filepath.Join(dataDir, "f")
		os.WriteFile(f, []byte("SAFE"), 0o644)
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { // the host swaps f between a file and a link out, atomically
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				tmp := filepath.Join(dataDir, ".swap")
				os.Remove(tmp)
				if i%2 == 0 {
					os.Symlink("../canary", tmp)
				} else {
					os.WriteFile(tmp, []byte("SAFE"), 0o644)
				}
				os.Rename(tmp, f)
			}
		}()
		g := newWat()
		path := g.str(pfx + "f")
		g.code(`(local.set $i (i32.const 0))
    (loop $l
      (if (i32.eqz (call $path_open (i32.const `+strconv.Itoa(e.grantFD())+`) (i32.const 1) %s (i32.const 0) (i64.const 2) (i64.const 0) (i32.const 0) (i32.const 64)))
        (then
          (i32.store (i32.const 80) (i32.const 16384)) (i32.store (i32.const 84) (i32.const 64)) (i32.store (i32.const 88) (i32.const 0))
          (drop (call $fd_read (i32.load (i32.const 64)) (i32.const 80) (i32.const 1) (i32.const 88)))
          (drop (call $fd_close (i32.load (i32.const 64))))
          (if (i32.eq (i32.load8_u (i32.const 16384)) (i32.const 87)) ;; 'W': the canary
            (then (local.set $bad (i32.add (local.get $bad) (i32.const 1))))
            (else (local.set $good (i32.add (local.get $good) (i32.const 1)))))))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $l (i32.lt_u (local.get $i) (i32.const 5000))))`, path)
		g.call("canary_reads", "(local.get $bad)")
		g.call("safe_reads", "(local.get $good)")
		src := strings.Replace(g.module(), `(func (export "_start")`, `(func (export "_start") (local $i i32) (local $bad i32) (local $good i32)`, 1)
		res, err := e.runWat(ctx, src, nil)
		close(stop)
		wg.Wait()
		if err != nil {
			return failed(err)
		}
		m := guestLines(res.Stdout)
		obs, ok := verdict(e, res)
		ok = ok && m["canary_reads"] == "0" && m["safe_reads"] != "0"
		return "host renames f between a file and a link to ../canary while the guest opens it 5000 times", obs, ok
	},
}

var probeRights = Probe{
	ID: 64, Name: "read-only preopen rights",
	weakness: WeakRWPreopens,
	run: func(ctx context.Context, e *probeEnv) (string, string, bool) {
		ro := filepath.Join(e.scratchDir(), "ro")
		os.Mkdir(ro, 0o755)
		os.WriteFile(filepath.Join(ro, "ro.txt"), []byte("ORIG"), 0o644)
		if _, err := e.backend(Preopen{Host: ro, Guest: "/data"}); err != nil {
			return failed(err)
		}
		g := newWat()
		fd := e.grantFD()
		g.open("open.trunc", fd, "ro.txt", oTrunc, wasiRead|wasiWrite, 0)
		g.open("open.write", fd, "ro.txt", 0, wasiWrite, 0)
		g.open("open.creat", fd, "new.txt", oCreat, wasiRead|wasiWrite, 0)
		g.call("unlink", fmt.Sprintf("(call $path_unlink_file (i32.const %d) %s)", fd, g.str("ro.txt")))
		g.call("rename", fmt.Sprintf("(call $path_rename (i32.const %d) %s (i32.const %d) %s)", fd, g.str("ro.txt"), fd, g.str("moved.txt")))
		g.call("mkdir", fmt.Sprintf("(call $path_create_directory (i32.const %d) %s)", fd, g.str("newdir")))
		res, err := e.runWat(ctx, g.module(), nil)
		if err != nil {
			return failed(err)
		}
		obs, ok := verdict(e, res)
		m := guestLines(res.Stdout)
		for _, k := range []string{"open.trunc", "open.write", "open.creat", "unlink", "rename", "mkdir"} {
			if m[k] == "0" || m[k] == "" {
				ok = false
			}
		}
		ents, _ := os.ReadDir(ro)
		content, _ := os.ReadFile(filepath.Join(ro, "ro.txt"))
		if len(ents) != 1 || string(content) != "ORIG" {
			ok = false
			obs += fmt.Sprintf("; HOST DIR CHANGED: %d entries, ro.txt %q", len(ents), content)
		}
		return "O_TRUNC, write, O_CREAT, unlink, rename, mkdir in a read-only preopen", obs, ok
	},
}

var probeFDTricks = Probe{
	ID: 65, Name: "fd tricks",
	// Control: an ungranted preopen (the host root) appears in the table.
	weakness: WeakHostRoot,
	run: func(ctx context.Context, e *probeEnv) (string, string, bool) {
		if _, err := e.workBackend(); err != nil {
			return failed(err)
		}
		g := newWat()
		g.code("(call $preopens)")
		g.call("renumber.missing", "(call $fd_renumber (i32.const 40) (i32.const 1))")
		g.call("renumber.stderr", "(call $fd_renumber (i32.const 2) (i32.const 3))")
		g.open("open.on_stdio", 3, "probe.txt", 0, wasiRead, 0)
		g.call("close.3", "(call $fd_close (i32.const 3))")
		g.call("close.again", "(call $fd_close (i32.const 3))")
		g.open("open.closed", 3, "probe.txt", 0, wasiRead, 0)
		res, err := e.runWat(ctx, g.module(), e.work(nil))
		if err != nil {
			return failed(err)
		}
		obs, ok := verdict(e, res)
		m := guestLines(res.Stdout)
		want := map[string]string{"preopen": e.workGuest(), "renumber.missing": fmt.Sprint(eBadf), "close.3": "0",
			"close.again": fmt.Sprint(eBadf), "open.closed": fmt.Sprint(eBadf)}
		for k, v := range want {
			if m[k] != v {
				ok = false
				obs += fmt.Sprintf("; %s=%q, want %q", k, m[k], v)
			}
		}
		// Stdio renumbered onto the preopen's slot must not keep the
		// directory's authority.
		if strings.Count(string(res.Stdout), "preopen=") != 1 || (m["renumber.stderr"] == "0" && m["open.on_stdio"] == "0") {
			ok = false
		}
		return "enumerate preopens; renumber a missing fd; renumber stderr onto the preopen and open through it; double close; open via a closed fd", obs, ok
	},
}

var probeSharedStorage = Probe{
	ID: 48, Name: "shared storage between invocations",
	// Control: /workspace is the parent of every workspace.
	weakness: WeakSharedWorkspace,
	run: func(ctx context.Context, e *probeEnv) (string, string, bool) {
		if _, err := e.backend(); err != nil {
			return failed(err)
		}
		a := newWat()
		a.open("a.create", 3, "wovyr-canary-48", oCreat, wasiRead|wasiWrite, 0)
		off, n := a.strAt(e.canary)
		a.code("(i32.store (i32.const 80) (i32.const %d)) (i32.store (i32.const 84) (i32.const %d))", off, n)
		a.code("(drop (call $path_open (i32.const 3) (i32.const 0) %s (i32.const 0) (i64.const 64) (i64.const 0) (i32.const 0) (i32.const 64)))", a.str("wovyr-canary-48"))
		a.call("a.write", "(call $fd_write (i32.load (i32.const 64)) (i32.const 80) (i32.const 1) (i32.const 88))")
		resA, err := e.runWat(ctx, a.module(), withWork(nil))
		if err != nil {
			return failed(err)
		}
		defer os.Remove(filepath.Join(e.b.work, "wovyr-canary-48"))
		bg := newWat()
		bg.open("b.open", 3, "wovyr-canary-48", 0, wasiRead, 0)
		bg.code("(call $preopens)")
		resB, err := e.runWat(ctx, bg.module(), withWork(nil))
		if err != nil {
			return failed(err)
		}
		obs, ok := verdict(e, resB)
		ok = ok && ran(resA)
		return "tenant A writes a canary into /workspace; tenant B, next, opens it", "A: " + strings.ReplaceAll(strings.TrimSpace(string(resA.Stdout)), "\n", "; ") + " | B: " + obs, ok
	},
}
