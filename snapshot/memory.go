package snapshot

import (
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// NewMemory returns an empty memfd of size bytes that can be sealed: the
// RAM a golden capture's guest writes into (vmm.Spec.RAM, shared).
func NewMemory(name string, size int64) (*os.File, error) {
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("snapshot: memfd: %w", err)
	}
	f := os.NewFile(uintptr(fd), name)
	if err := f.Truncate(size); err != nil {
		f.Close()
		return nil, fmt.Errorf("snapshot: size memfd: %w", err)
	}
	return f, nil
}

// sealAll forbids writing, resizing and changing the seals: what a clone's
// VMM maps is what was captured, for as long as the memfd lives. Private
// (copy-on-write) mappings stay possible, which is all a clone needs.
const sealAll = unix.F_SEAL_WRITE | unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_SEAL

// Seal seals f (a memfd of NewMemory's) against every change. It fails if
// anything still maps it shared and writable (a VMM that has not exited).
func Seal(f *os.File) error {
	if _, err := unix.FcntlInt(f.Fd(), unix.F_ADD_SEALS, sealAll); err != nil {
		return fmt.Errorf("snapshot: seal memory: %w", err)
	}
	return nil
}

// Sealed reports whether f carries every seal Seal sets.
func Sealed(f *os.File) bool {
	s, err := unix.FcntlInt(f.Fd(), unix.F_GET_SEALS, 0)
	return err == nil && s&sealAll == sealAll
}

// SaveMemory writes f's content to a new file at path, 0600, leaving its
// holes as holes (a guest's RAM is mostly never touched).
func SaveMemory(path string, f *os.File) error {
	dst, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	err = copySparse(dst, f)
	if err == nil {
		err = dst.Sync()
	}
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return fmt.Errorf("snapshot: save memory: %w", err)
	}
	return nil
}

// LoadMemory returns a sealed memfd holding the file at path: the RAM of a
// golden another process captured.
func LoadMemory(path string) (*os.File, error) {
	src, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	defer src.Close()
	st, err := src.Stat()
	if err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	m, err := NewMemory("wovyr-golden", st.Size())
	if err != nil {
		return nil, err
	}
	if err := copySparse(m, src); err != nil {
		m.Close()
		return nil, fmt.Errorf("snapshot: load memory: %w", err)
	}
	if err := Seal(m); err != nil {
		m.Close()
		return nil, err
	}
	return m, nil
}

// CopyFile copies src to a new file dst, 0600, holes kept: a clone's
// writable disk from its golden's.
func CopyFile(dst, src string) error {
	s, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	defer s.Close()
	d, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	err = copySparse(d, s)
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(dst)
		return fmt.Errorf("snapshot: copy %s: %w", src, err)
	}
	return nil
}

// copySparse copies src's data extents (SEEK_DATA/SEEK_HOLE) into dst at
// the same offsets and gives dst src's size.
func copySparse(dst, src *os.File) error {
	st, err := src.Stat()
	if err != nil {
		return err
	}
	size := st.Size()
	fd := int(src.Fd())
	for off := int64(0); off < size; {
		data, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break // only a hole is left
		}
		if err != nil {
			return err
		}
		hole, err := unix.Seek(fd, data, unix.SEEK_HOLE)
		if err != nil {
			return err
		}
		if _, err := io.Copy(io.NewOffsetWriter(dst, data), io.NewSectionReader(src, data, hole-data)); err != nil {
			return err
		}
		off = hole
	}
	return dst.Truncate(size)
}
