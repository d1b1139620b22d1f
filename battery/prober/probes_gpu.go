package prober

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// gpuNodes is rows 95 and 97's inside half: which NVIDIA device nodes the
// sandbox shows (/dev/nvidia*, /dev/nvidia-caps/*), which of them open
// read-write, and, given "PATH MAJOR MINOR", whether a node forged with
// mknod for another device's numbers opens. Data: visible, openable
// (comma lists, sorted), forged ("opened", or why not), and the device
// selection variables the workload sees.
func gpuNodes(args []string) Report {
	var nodes []string
	for _, pat := range []string{"/dev/nvidia*", "/dev/nvidia-caps/*"} {
		m, _ := filepath.Glob(pat)
		nodes = append(nodes, m...)
	}
	slices.Sort(nodes)
	var open []string
	for _, n := range nodes {
		if st, err := os.Stat(n); err != nil || st.IsDir() {
			continue
		}
		if f, err := os.OpenFile(n, os.O_RDWR, 0); err == nil {
			f.Close()
			open = append(open, n)
		}
	}
	rep := Report{Count: len(open), Data: map[string]string{
		"visible":  strings.Join(nodes, ","),
		"openable": strings.Join(open, ","),
		"nvidia":   os.Getenv("NVIDIA_VISIBLE_DEVICES"),
		"cuda":     os.Getenv("CUDA_VISIBLE_DEVICES"),
	}}
	if len(args) == 3 {
		rep.Data["forged"] = forge(args[0], args[1], args[2])
	}
	return rep
}

// forge makes a character node for major:minor at path and opens it.
func forge(path, major, minor string) string {
	ma, err1 := strconv.ParseUint(major, 10, 32)
	mi, err2 := strconv.ParseUint(minor, 10, 32)
	if err1 != nil || err2 != nil {
		return "bad numbers"
	}
	os.MkdirAll(filepath.Dir(path), 0o755)
	if err := unix.Mknod(path, unix.S_IFCHR|0o666, int(unix.Mkdev(uint32(ma), uint32(mi)))); err != nil {
		return "mknod: " + errnoName(err)
	}
	defer os.Remove(path)
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return "open: " + errnoName(err)
	}
	f.Close()
	return "opened"
}

// gpuHold is row 96's tenant A: it opens the device nodes in args and
// leaves a detached sleeper holding them, to outlive the invocation if
// the sandbox lets it. Count is how many it opened.
func gpuHold(args []string) Report {
	var files []*os.File
	for _, p := range args {
		if f, err := os.OpenFile(p, os.O_RDWR, 0); err == nil {
			files = append(files, f)
		}
	}
	cmd := exec.Command("/proc/self/exe", "probe", "sleep", "600000", "wovyr-gpu-holder")
	cmd.ExtraFiles = files
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return Report{Count: len(files), Errno: errnoName(err)}
	}
	return Report{Count: len(files), Data: map[string]string{"holder": strconv.Itoa(cmd.Process.Pid)}}
}
