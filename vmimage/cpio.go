package vmimage

import (
	"fmt"
	"io"
)

// cpioWriter writes the "newc" cpio format the kernel unpacks as an
// initramfs. It is written here, not imported, because it must also write
// device nodes (rdev), which the small Go cpio libraries drop.
type cpioWriter struct {
	w   io.Writer
	ino int
	err error
}

// Mode type bits (as in stat.h).
const (
	cpioDir  = 0o040000
	cpioReg  = 0o100000
	cpioLink = 0o120000
	cpioChr  = 0o020000
)

func (c *cpioWriter) entry(name string, mode uint32, rdevMajor, rdevMinor uint32, data []byte) {
	if c.err != nil {
		return
	}
	c.ino++
	nlink := 1
	if mode&0o170000 == cpioDir {
		nlink = 2
	}
	hdr := fmt.Sprintf("070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		c.ino, mode, 0, 0, nlink, 0, len(data), 0, 0, rdevMajor, rdevMinor, len(name)+1, 0)
	buf := make([]byte, 0, len(hdr)+len(name)+8+len(data))
	buf = append(buf, hdr...)
	buf = append(buf, name...)
	buf = append(buf, 0)
	buf = pad4(buf)
	buf = append(buf, data...)
	buf = pad4(buf)
	_, c.err = c.w.Write(buf)
}

func pad4(b []byte) []byte {
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

// Dir, File, Symlink and CharDev add entries; names have no leading slash.
func (c *cpioWriter) Dir(name string, perm uint32) { c.entry(name, cpioDir|perm, 0, 0, nil) }
func (c *cpioWriter) File(name string, perm uint32, data []byte) {
	c.entry(name, cpioReg|perm, 0, 0, data)
}
func (c *cpioWriter) Symlink(name, target string) {
	c.entry(name, cpioLink|0o777, 0, 0, []byte(target))
}
func (c *cpioWriter) CharDev(name string, perm, major, minor uint32) {
	c.entry(name, cpioChr|perm, major, minor, nil)
}

// Close writes the trailer and reports the first error.
func (c *cpioWriter) Close() error {
	c.entry("TRAILER!!!", 0, 0, 0, nil)
	return c.err
}
