package agent

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/wovyr/wovyr/sandbox"
)

// MaxListEntries bounds one directory listing: a reply is one frame.
const MaxListEntries = 10000

// noBlockNoFollow opens without following a final symlink and without
// blocking (a FIFO planted by the workload cannot stall a read).
const noBlockNoFollow = unix.O_NONBLOCK | unix.O_NOFOLLOW

// fileJob answers a File job: one operation in job.Dir.
func fileJob(job Job) Reply {
	rep := Reply{ID: job.ID}
	fr, err := FileOp(job.Dir, job.File)
	if err != nil {
		rep.ExitCode, rep.Error, rep.FileClass = 1, err.Error(), sandbox.BadInput
		if errors.Is(err, fs.ErrNotExist) {
			rep.FileClass = sandbox.NotFound
		}
		return rep
	}
	rep.File = fr
	return rep
}

// FileOp does op inside dir, through os.Root: a path that leaves dir, by
// ".." or by a symlink, is refused, as are the paths ValidatePath refuses.
// A read opens only a regular file, without following a final symlink and
// without blocking (a FIFO planted by the workload cannot stall it). A
// missing path's error wraps fs.ErrNotExist.
func FileOp(dir string, op *sandbox.FileOp) (*sandbox.FileReply, error) {
	if err := op.Validate(); err != nil {
		return nil, err
	}
	if op.Op == sandbox.FileWrite {
		// The invocation path's own writer: the same confinement.
		return &sandbox.FileReply{}, writeFiles(dir, []File{{Path: op.Path, Data: op.Data, Mode: op.Mode}})
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("open workdir: %w", err)
	}
	defer root.Close()
	switch op.Op {
	case sandbox.FileRead:
		b, err := readFile(root, op.Path, op.Max)
		return &sandbox.FileReply{Data: b}, err
	case sandbox.FileStat:
		fi, err := root.Lstat(op.Path)
		if err != nil {
			return nil, err
		}
		return &sandbox.FileReply{Entries: []sandbox.FileInfo{infoOf(op.Path, fi)}}, nil
	case sandbox.FileList:
		return listDir(root, op.Path)
	case sandbox.FileRemove:
		if _, err := root.Lstat(op.Path); err != nil {
			return nil, err
		}
		return &sandbox.FileReply{}, root.RemoveAll(op.Path)
	case sandbox.FileArchive:
		b, err := ArchiveDir(root, op.Path, op.Max)
		return &sandbox.FileReply{Data: b}, err
	case sandbox.FileExtract:
		return &sandbox.FileReply{}, ExtractInto(root, op.Path, op.Data)
	}
	return nil, fmt.Errorf("file operation %q", op.Op)
}

func readFile(root *os.Root, p string, max int64) ([]byte, error) {
	if max == 0 {
		max = sandbox.MaxFileBytes
	}
	f, err := root.OpenFile(p, os.O_RDONLY|noBlockNoFollow, 0)
	if errors.Is(err, unix.ELOOP) {
		return nil, fmt.Errorf("%s is a symlink; read its target instead", p)
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	switch {
	case err != nil:
		return nil, err
	case !fi.Mode().IsRegular():
		return nil, fmt.Errorf("%s is not a regular file", p)
	case fi.Size() > max:
		return nil, fmt.Errorf("%s is %d bytes, over the %d-byte limit", p, fi.Size(), max)
	}
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err == nil && int64(len(b)) > max {
		err = fmt.Errorf("%s grew past the %d-byte limit", p, max)
	}
	return b, err
}

func listDir(root *os.Root, p string) (*sandbox.FileReply, error) {
	if p == "" {
		p = "."
	}
	f, err := root.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	ents, err := f.ReadDir(MaxListEntries + 1)
	if err != nil && err != io.EOF {
		return nil, err
	}
	if len(ents) > MaxListEntries {
		return nil, fmt.Errorf("%s has more than %d entries", p, MaxListEntries)
	}
	out := &sandbox.FileReply{Entries: []sandbox.FileInfo{}}
	for _, e := range ents {
		fi, err := e.Info() // of a symlink itself, not its target
		if err != nil {
			continue // removed meanwhile
		}
		out.Entries = append(out.Entries, infoOf(path.Join(p, e.Name()), fi))
	}
	slices.SortFunc(out.Entries, func(a, b sandbox.FileInfo) int { return strings.Compare(a.Path, b.Path) })
	return out, nil
}

func infoOf(p string, fi fs.FileInfo) sandbox.FileInfo {
	t := "other"
	switch m := fi.Mode(); {
	case m.IsRegular():
		t = "file"
	case m.IsDir():
		t = "dir"
	case m&fs.ModeSymlink != 0:
		t = "symlink"
	}
	return sandbox.FileInfo{Path: p, Type: t, Size: fi.Size(), Mode: uint32(fi.Mode().Perm()), ModTime: fi.ModTime().UTC()}
}
