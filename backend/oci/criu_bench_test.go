package oci

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/wovyr/wovyr/image"
	"github.com/wovyr/wovyr/sandbox"
)

// BenchmarkContainerCRIURestore is issue #17's container question (ADR
// 0022): does restoring a runc checkpoint of a warmed python3 (imports
// loaded, waiting for its job on stdin) reach a first result sooner than a
// cold start of the same template? Interleaved per round:
//
//   - cold: "runc run" of a raw bundle (Peer) whose process is
//     python3 -c 'import json, re, subprocess; print(1)', to its "1";
//   - restore: "runc --criu CRIU restore -d" of a checkpoint of the same
//     bundle taken after those imports ran, plus the job line, to its "1";
//   - wovyr: the backend's one-shot Prepare+Run+Destroy of the same
//     command (what "wovyr run" pays today on this runtime).
//
// CRIU >= 4.1 must be built privately (Debian 12's 3.17 fails on this
// kernel); the benchmark skips without it:
//
//	WOVYR_CRIU=/opt/wovyr-criu/sbin/criu go test ./backend/oci -run '^$' \
//	    -bench BenchmarkContainerCRIURestore -benchtime 15x
func BenchmarkContainerCRIURestore(b *testing.B) {
	criu := privateCRIU(b)
	if _, err := os.Stat(filepath.Join(image.RootFS(filepath.Join(testState, "images"), "python"), "usr/bin/python3")); err != nil {
		b.Skipf("no python template (%v): build one with python3 in it as images/python", err)
	}
	cfg := testConfig(b)
	cfg.Runtime = "runc" // crun 1.8.1 in Debian has no CRIU support
	be, err := NewContainer(cfg)
	if err != nil {
		b.Fatal(err)
	}
	if c := be.Probe(context.Background()); !c.Available {
		b.Skip(c.Reason)
	}
	// The workload, and a heavier start (~100 ms of imports here
	// against ~25 ms) to see where a restore would begin to pay.
	for _, c := range []struct{ name, imports string }{
		{"imports=3", "json, re, subprocess"},
		{"imports=15", "argparse, asyncio, csv, decimal, email.mime.multipart, http.client, json, logging, re, subprocess, tarfile, unittest, urllib.request, xml.etree.ElementTree, zipfile"},
	} {
		b.Run(c.name, func(b *testing.B) { benchCRIU(b, be, criu, c.imports) })
	}
}

func benchCRIU(b *testing.B, be *Backend, criu, imports string) {
	ctx := context.Background()
	cold, err := be.NewPeer(ctx, "python", []string{"/usr/bin/python3", "-c", "import " + imports + "; print(1)"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(cold.Close)
	warm, err := be.NewPeer(ctx, "python", []string{"/usr/bin/python3", "-uc",
		"import sys, " + imports + "; print('ready'); sys.stdin.readline(); print(1)"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(warm.Close)
	owner := criuConfig(b, warm)
	// The restored init opens its images from inside its user namespace:
	// as the sandbox's root (an unprivileged host uid), so the images are
	// that uid's, and timens-0.img before its uid map is written (CRIU
	// 4.1.1 restores the time namespace first; measured: one restore in ~15
	// fails with EACCES), so that one file, clock offsets only, is
	// readable by all (chownTree).
	dir, err := os.MkdirTemp("", "wovyr-criu-bench-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o711); err != nil {
		b.Fatal(err)
	}
	img := filepath.Join(dir, "checkpoint")
	ckpt := checkpointWarm(b, warm, criu, img)
	size, err := chownTree(img, owner)
	if err != nil {
		b.Fatal(err)
	}

	// The runtime's own floor: the same bundle running /bin/true.
	floor, err := be.NewPeer(ctx, "python", []string{"/bin/true"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(floor.Close)
	var coldT, floorT, restoreT, runcT, oursT []time.Duration
	for i := 0; i < b.N; i++ {
		floorT = append(floorT, rawRun(b, floor))
		coldT = append(coldT, coldFirstResult(b, cold))
		total, runc := restoreFirstResult(b, warm, criu, img, i)
		restoreT, runcT = append(restoreT, total), append(runcT, runc)
		oursT = append(oursT, wovyrOneShot(b, be, imports))
	}
	mc, mr := median(coldT), median(restoreT)
	b.ReportMetric(float64(mc.Microseconds())/1000, "cold-runc-run-ms")
	b.ReportMetric(float64(median(floorT).Microseconds())/1000, "runc-run-true-ms")
	b.ReportMetric(float64(mr.Microseconds())/1000, "restore-first-result-ms")
	b.ReportMetric(float64(median(runcT).Microseconds())/1000, "runc-restore-ms")
	b.ReportMetric(float64(median(oursT).Microseconds())/1000, "wovyr-oneshot-ms")
	b.ReportMetric(float64(ckpt.Microseconds())/1000, "checkpoint-ms")
	b.ReportMetric(float64(size)/(1<<20), "image-MiB")
	b.ReportMetric(float64(mr)/float64(mc), "restore/cold")
}

// privateCRIU is the CRIU the benchmark uses ($WOVYR_CRIU, else
// /opt/wovyr-criu/sbin/criu), or a skip saying why there is none.
func privateCRIU(b *testing.B) string {
	path := os.Getenv("WOVYR_CRIU")
	if path == "" {
		path = "/opt/wovyr-criu/sbin/criu"
	}
	out, err := exec.Command(path, "--version").Output()
	if err != nil {
		b.Skipf("no private CRIU at %s (%v): build CRIU >= 4.1 from Debian trixie's source (ADR 0022) or set WOVYR_CRIU", path, err)
	}
	m := regexp.MustCompile(`Version: (\d+)\.(\d+)`).FindStringSubmatch(string(out))
	if m == nil {
		b.Skipf("%s --version: no version in %q", path, out)
	}
	major, _ := strconv.Atoi(m[1])
	minor, _ := strconv.Atoi(m[2])
	if major < 4 || major == 4 && minor < 1 {
		b.Skipf("%s is CRIU %s.%s: this kernel needs >= 4.1 (DESIGN §5)", path, m[1], m[2])
	}
	return path
}

// criuConfig points runc's CRIU at a config file of the bundle's own (the
// org.criu.config annotation) that locks the network with nftables: CRIU's
// default, iptables, is not installed here, and the host-wide
// /etc/criu/runc.conf is not the benchmark's to write.
// It returns the host uid and gid of the bundle's root.
func criuConfig(b *testing.B, p *Peer) [2]int {
	conf := filepath.Join(b.TempDir(), "criu.conf")
	if err := os.WriteFile(conf, []byte("network-lock nftables\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	path := filepath.Join(p.dir, "config.json")
	data, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	var spec specs.Spec
	if err := json.Unmarshal(data, &spec); err != nil {
		b.Fatal(err)
	}
	if spec.Annotations == nil {
		spec.Annotations = map[string]string{}
	}
	spec.Annotations["org.criu.config"] = conf
	if data, err = json.Marshal(&spec); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		b.Fatal(err)
	}
	return [2]int{int(spec.Linux.UIDMappings[0].HostID), int(spec.Linux.GIDMappings[0].HostID)}
}

// chownTree gives dir and everything under it to owner (uid, gid), files
// 0600 but timens-0.img 0644, directories 0711, and returns the size of its
// files.
func chownTree(dir string, owner [2]int) (size int64, err error) {
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if info, err := d.Info(); err == nil && info.Mode().IsRegular() {
			size += info.Size()
		}
		mode := fs.FileMode(0o600)
		switch {
		case d.IsDir():
			mode = 0o711
		case d.Name() == "timens-0.img":
			mode = 0o644
		}
		if err := os.Chmod(path, mode); err != nil {
			return err
		}
		return os.Lchown(path, owner[0], owner[1])
	})
	return size, err
}

// stdio is a container's stdin, stdout and stderr as plain pipes (CRIU
// restores a container's stdio only onto pipes it is given). The caller
// keeps the write end of stdin and the read end of stdout.
type stdio struct {
	in, out, errR *os.File
	child         [3]*os.File
	stderr        chan string // all the container wrote there, once it closed it
}

func newStdio(b *testing.B) *stdio {
	s := &stdio{stderr: make(chan string, 1)}
	inR, inW, err := os.Pipe()
	if err != nil {
		b.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		b.Fatal(err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		b.Fatal(err)
	}
	s.in, s.out, s.errR, s.child = inW, outR, errR, [3]*os.File{inR, outW, errW}
	go func() {
		all, _ := io.ReadAll(errR)
		s.stderr <- string(all)
	}()
	return s
}

// attach gives cmd the child ends; afterStart closes them here.
func (s *stdio) attach(cmd *exec.Cmd) {
	cmd.Stdin, cmd.Stdout, cmd.Stderr = s.child[0], s.child[1], s.child[2]
}

func (s *stdio) afterStart() {
	for _, f := range s.child {
		f.Close()
	}
}

// close closes every end still open here (a second Close only errs).
func (s *stdio) close() {
	for _, f := range append(s.child[:], s.in, s.out, s.errR) {
		f.Close()
	}
}

// errText is the container's stderr for a failure message, once it closed
// it, or a note if it has not within a few seconds.
func (s *stdio) errText() string {
	select {
	case text := <-s.stderr:
		return text
	case <-time.After(5 * time.Second):
		return "(stderr still open)"
	}
}

// expect reads one line from the container's stdout.
func (s *stdio) expect(b *testing.B, r *bufio.Reader, want string) {
	line, err := r.ReadString('\n')
	if err != nil || line != want+"\n" {
		s.in.Close()
		b.Fatalf("container stdout: %q, %v (want %q); stderr: %s", line, err, want, s.errText())
	}
}

// runOut runs a runtime command and fails the benchmark with its output
// and the end of CRIU's log in work, if it wrote one.
func runOut(b *testing.B, cmd *exec.Cmd, work string) {
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("%s: %v: %s\n%s", strings.Join(cmd.Args, " "), err, out, criuLog(work))
	}
}

// criuLog is the last lines of the CRIU logs in work.
func criuLog(work string) string {
	logs, _ := filepath.Glob(filepath.Join(work, "*.log"))
	var sb strings.Builder
	for _, l := range logs {
		data, _ := os.ReadFile(l)
		lines := strings.Split(strings.TrimSpace(string(data)), "\n")
		fmt.Fprintf(&sb, "%s:\n%s\n", filepath.Base(l), strings.Join(lines[max(0, len(lines)-15):], "\n"))
	}
	return sb.String()
}

// checkpointWarm starts the warm bundle detached, waits until python3 has
// imported, and checkpoints it into img (the container is gone after).
func checkpointWarm(b *testing.B, p *Peer, criu, img string) time.Duration {
	id := filepath.Base(p.dir) + "-golden"
	b.Cleanup(func() { _ = p.d.run(context.Background(), 10*time.Second, "delete", "--force", id) })
	s := newStdio(b)
	defer s.close()
	run := p.d.command("run", "-d", "--bundle", p.dir, id)
	s.attach(run)
	err := run.Run()
	s.afterStart()
	if err != nil {
		b.Fatalf("runc run -d: %v: %s", err, s.errText())
	}
	s.expect(b, bufio.NewReader(s.out), "ready")
	work := b.TempDir()
	start := time.Now()
	runOut(b, exec.Command(p.d.path, append([]string{"--criu", criu}, p.d.argv("checkpoint",
		"--image-path", img, "--work-path", work, id)...)...), work)
	took := time.Since(start)
	runOut(b, p.d.command("delete", "--force", id), "")
	return took
}

// coldFirstResult times "runc run" of the cold bundle to its first line.
func coldFirstResult(b *testing.B, p *Peer) time.Duration {
	cmd, done := p.Command()
	defer done()
	s := newStdio(b)
	defer s.close()
	s.attach(cmd)
	start := time.Now()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	s.afterStart()
	s.expect(b, bufio.NewReader(s.out), "1")
	took := time.Since(start)
	if err := cmd.Wait(); err != nil {
		b.Fatalf("runc run: %v: %s", err, s.errText())
	}
	return took
}

// restoreFirstResult restores the checkpoint as a new container, sends the
// job line and times it to the job's "1"; runc is the restore alone.
func restoreFirstResult(b *testing.B, p *Peer, criu, img string, n int) (total, runc time.Duration) {
	id := fmt.Sprintf("%s-clone-%d", filepath.Base(p.dir), n)
	defer func() { _ = p.d.run(context.Background(), 10*time.Second, "delete", "--force", id) }()
	s := newStdio(b)
	defer s.close()
	work := b.TempDir()
	restore := exec.Command(p.d.path, append([]string{"--criu", criu}, p.d.argv("restore", "-d",
		"--image-path", img, "--work-path", work, "--bundle", p.dir, id)...)...)
	s.attach(restore)
	start := time.Now()
	err := restore.Run()
	runc = time.Since(start)
	s.afterStart()
	if err != nil {
		b.Fatalf("runc restore: %v: %s\n%s", err, s.errText(), criuLog(work))
	}
	if _, err := s.in.WriteString("job\n"); err != nil {
		b.Fatal(err)
	}
	s.expect(b, bufio.NewReader(s.out), "1")
	return time.Since(start), runc
}

// wovyrOneShot times the backend's own cold path for the same command.
func wovyrOneShot(b *testing.B, be *Backend, imports string) time.Duration {
	ctx := context.Background()
	start := time.Now()
	sb, err := be.Prepare(ctx, sandbox.Template{Kind: sandbox.KindCommand, Image: "python"})
	if err != nil {
		b.Fatal(err)
	}
	inv := cmd("/usr/bin/python3", "-c", "import "+imports+"; print(1)")
	inv.Workload.Image = "python"
	res, err := sb.Run(ctx, inv)
	if err != nil {
		b.Fatal(err)
	}
	took := time.Since(start)
	if err := sb.Destroy(ctx); err != nil {
		b.Fatal(err)
	}
	if string(res.Stdout) != "1\n" {
		b.Fatalf("wovyr one-shot stdout %q, exit %d, stderr %q", res.Stdout, res.ExitCode, res.Stderr)
	}
	return took
}
