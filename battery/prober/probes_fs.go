package prober

import (
	"errors"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// exchange swaps paths a and b (args[0], args[1]) with
// renameat2(RENAME_EXCHANGE) for ms milliseconds (args[2]), racing a host
// that reads one of them. Where the filesystem has no exchange (EINVAL) it
// renames a symlink and a regular file over a in turn instead.
func exchange(args []string) Report {
	a, b := strArg(args, 0, "a"), strArg(args, 1, "b")
	end := time.Now().Add(time.Duration(intArg(args, 2, 1000)) * time.Millisecond)
	rep := Report{Data: map[string]string{"mode": "exchange"}}
	for time.Now().Before(end) {
		err := unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_EXCHANGE)
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) {
			rep.Data["mode"] = "rename"
			err = renameOver(a, b, rep.Count)
		}
		if err != nil {
			rep.Errno = errnoName(err)
			return rep
		}
		rep.Count++
	}
	return rep
}

// renameOver puts a copy of b (a symlink) over a on odd rounds, and a
// regular file over a on even ones.
func renameOver(a, b string, round int) error {
	tmp := a + ".swap"
	if round%2 == 0 {
		target, err := os.Readlink(b)
		if err != nil {
			return err
		}
		if err := os.Symlink(target, tmp); err != nil {
			return err
		}
	} else if err := os.WriteFile(tmp, []byte("safe\n"), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, a)
}
