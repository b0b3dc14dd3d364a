package pagecache

import (
	"fmt"
	"io"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Warm reads paths into the page cache and returns once they are there,
// with their total size in bytes: it asks the kernel to read ahead
// (POSIX_FADV_WILLNEED, which starts every read at once), then reads each
// file through, since the kernel may cap or drop what it read ahead. Call
// it off any path that must not wait (a 40 GB file takes as long as the
// disk needs). Errors name the file.
func Warm(paths []string) (uint64, error) {
	total, err := advise(paths, unix.FADV_WILLNEED)
	if err != nil {
		return total, err
	}
	buf := make([]byte, 1<<20)
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return total, err
		}
		_, err = io.CopyBuffer(io.Discard, struct{ io.Reader }{f}, buf)
		f.Close()
		if err != nil {
			return total, fmt.Errorf("pagecache: %s: %w", p, err)
		}
	}
	return total, nil
}

// Drop asks the kernel to evict paths' clean pages from the page cache
// (POSIX_FADV_DONTNEED) and returns their total size in bytes. Pages a
// running process has mapped stay. Errors name the file.
func Drop(paths []string) (uint64, error) {
	return advise(paths, unix.FADV_DONTNEED)
}

func advise(paths []string, advice int) (uint64, error) {
	var total uint64
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return total, err
		}
		st, err := f.Stat()
		if err == nil {
			total += uint64(st.Size())
			err = unix.Fadvise(int(f.Fd()), 0, 0, advice)
		}
		f.Close()
		if err != nil {
			return total, fmt.Errorf("pagecache: %s: %w", p, err)
		}
	}
	return total, nil
}

// Resident reports how many bytes of path are in the page cache now and
// the file's size, by mincore(2) on a read-only mapping of it. An empty
// file is (0, 0). Errors name the file.
func Resident(path string) (cached, size uint64, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || st.Size() == 0 {
		return 0, 0, err
	}
	size = uint64(st.Size())
	data, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return 0, size, fmt.Errorf("pagecache: %s: mmap: %w", path, err)
	}
	defer unix.Munmap(data)
	page := uint64(os.Getpagesize())
	vec := make([]byte, (size+page-1)/page)
	// x/sys/unix has no Mincore wrapper on Linux; the call is
	// mincore(addr, length, vec).
	if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&data[0])), uintptr(len(data)), uintptr(unsafe.Pointer(&vec[0]))); errno != 0 {
		return 0, size, fmt.Errorf("pagecache: %s: mincore: %w", path, errno)
	}
	for i, b := range vec {
		if b&1 != 0 {
			cached += min(page, size-uint64(i)*page)
		}
	}
	return cached, size, nil
}
