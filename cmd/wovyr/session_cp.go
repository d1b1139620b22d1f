package main

import (
	"context"
	"io"
	"os"

	"github.com/wovyr/wovyr/sandbox"
)

func sessionCpMain(ctx context.Context, sc *sessionCtx, args []string) int {
	fs := sc.flags("cp", "cp [flags] LOCAL ID:PATH | ID:PATH LOCAL\n\nUpload keeps LOCAL's permission bits; LOCAL - is stdin or stdout. With -r, a\ndirectory's tree is copied into the other directory (made if missing), as one tar\nstream of at most 64 MiB: files, directories and symlinks with their permission\nbits; never through a symlink out of either directory.")
	recursive := fs.Bool("r", false, "copy a directory's tree")
	cl, code := sc.start(fs, args, func(n int) bool { return n == 2 })
	if cl == nil {
		return code
	}
	src, dst := fs.Arg(0), fs.Arg(1)
	if *recursive {
		return sc.copyTree(ctx, cl, src, dst, fs)
	}
	if id, p, ok := splitRemote(src); ok {
		data, err := cl.Download(ctx, id, p)
		if err != nil {
			return sc.fail(err)
		}
		if dst == "-" {
			_, err = sc.stdout.Write(data)
		} else {
			err = os.WriteFile(dst, data, 0o644)
		}
		if err != nil {
			return sc.fail(sandbox.Wrap(sandbox.BadInput, err, "write %s", dst))
		}
		return 0
	}
	id, p, ok := splitRemote(dst)
	if !ok {
		fs.Usage()
		return exitUsage
	}
	data, mode, err := readLocal(src)
	if err != nil {
		return sc.fail(err)
	}
	if err := cl.Upload(ctx, id, p, data, mode); err != nil {
		return sc.fail(err)
	}
	return 0
}

// readLocal reads a file to upload (- is stdin), bounded like the API.
func readLocal(name string) ([]byte, uint32, error) {
	r, mode := io.Reader(os.Stdin), uint32(0)
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return nil, 0, sandbox.Wrap(sandbox.BadInput, err, "read %s", name)
		}
		defer f.Close()
		if fi, err := f.Stat(); err == nil {
			mode = uint32(fi.Mode().Perm())
		}
		r = f
	}
	data, err := io.ReadAll(io.LimitReader(r, sandbox.MaxFileBytes+1))
	switch {
	case err != nil:
		return nil, 0, sandbox.Wrap(sandbox.BadInput, err, "read %s", name)
	case len(data) > sandbox.MaxFileBytes:
		return nil, 0, sandbox.Errorf(sandbox.BadInput, "", "%s exceeds %d bytes", name, sandbox.MaxFileBytes)
	}
	return data, mode, nil
}
