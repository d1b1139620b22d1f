package image

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// busyboxPath is where Debian's busybox-static installs its static binary.
const busyboxPath = "/bin/busybox"

// buildBusybox fills root with a static busybox and a symlink per applet.
func buildBusybox(ctx context.Context, root string, progress io.Writer) error {
	src, err := os.Open(busyboxPath)
	if err != nil {
		return fmt.Errorf("image: busybox needs apt package busybox-static: %w", err)
	}
	defer src.Close()
	for _, d := range []string{"bin", "sbin", "usr/bin", "usr/sbin", "etc", "tmp", "proc", "dev", "sys", "root", "workspace"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			return err
		}
	}
	if err := os.Chmod(filepath.Join(root, "tmp"), 0o1777|os.ModeSticky); err != nil {
		return err
	}
	dst, err := os.OpenFile(filepath.Join(root, "bin/busybox"), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		return err
	}
	if err := dst.Close(); err != nil {
		return err
	}
	out, err := exec.CommandContext(ctx, busyboxPath, "--list-full").Output()
	if err != nil {
		return fmt.Errorf("image: busybox --list-full: %w", err)
	}
	n := 0
	for _, app := range strings.Fields(string(out)) {
		if app == "bin/busybox" || strings.Contains(app, "..") {
			continue
		}
		if err := os.Symlink("/bin/busybox", filepath.Join(root, app)); err != nil && !os.IsExist(err) {
			return err
		}
		n++
	}
	files := map[string]string{
		"etc/passwd":   "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n",
		"etc/group":    "root:x:0:\nnogroup:x:65534:\n",
		"etc/hostname": "wovyr\n",
	}
	for p, s := range files {
		if err := os.WriteFile(filepath.Join(root, p), []byte(s), 0o644); err != nil {
			return err
		}
	}
	fmt.Fprintf(progress, "busybox: %d applets\n", n)
	return nil
}

// debootstrap builds a minbase bookworm with the include packages into
// root, passing its progress lines through. (The python recipe's slow
// start, an interpreter and its imports, is what the gVisor clone
// benchmark needs: ADR 0020.)
func debootstrap(ctx context.Context, root string, progress io.Writer, include ...string) error {
	if _, err := exec.LookPath("debootstrap"); err != nil {
		return fmt.Errorf("image: base needs apt package debootstrap: %w", err)
	}
	args := []string{"--variant=minbase"}
	if len(include) > 0 {
		args = append(args, "--include="+strings.Join(include, ","))
	}
	if m := debianMirror(); m != "" {
		args = append(args, "bookworm", root, m)
	} else {
		args = append(args, "bookworm", root)
	}
	cmd := exec.CommandContext(ctx, "debootstrap", args...)
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	done := make(chan struct{})
	var tail []string
	go func() {
		defer close(done)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			fmt.Fprintln(progress, "debootstrap:", sc.Text())
			tail = append(tail, sc.Text())
			if len(tail) > 20 {
				tail = tail[1:]
			}
		}
		io.Copy(io.Discard, pr)
	}()
	err := cmd.Run()
	pw.Close()
	<-done
	if err != nil {
		return fmt.Errorf("image: debootstrap: %w: %s", err, strings.Join(tail, "\n"))
	}
	// Caches and logs a tool template does not need.
	for _, p := range []string{"var/cache/apt/archives", "var/lib/apt/lists", "debootstrap"} {
		_ = os.RemoveAll(filepath.Join(root, p))
	}
	return os.MkdirAll(filepath.Join(root, "workspace"), 0o755)
}

// debianMirror returns the Debian mirror the host's apt sources use, so the
// template comes from the same place as the host's packages.
func debianMirror() string {
	files, _ := filepath.Glob("/etc/apt/sources.list.d/*.sources")
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, stanza := range strings.Split(string(b), "\n\n") {
			var uri string
			suite := false
			for _, line := range strings.Split(stanza, "\n") {
				if v, ok := strings.CutPrefix(line, "URIs:"); ok && len(strings.Fields(v)) > 0 {
					uri = strings.Fields(v)[0]
				}
				if v, ok := strings.CutPrefix(line, "Suites:"); ok {
					for _, s := range strings.Fields(v) {
						suite = suite || s == "bookworm"
					}
				}
			}
			if suite && uri != "" {
				return uri
			}
		}
	}
	if b, err := os.ReadFile("/etc/apt/sources.list"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if len(f) >= 3 && f[0] == "deb" && f[2] == "bookworm" {
				return f[1]
			}
		}
	}
	return ""
}
