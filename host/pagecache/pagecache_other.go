//go:build !linux

package pagecache

// Warm returns ErrUnsupported off Linux.
func Warm([]string) (uint64, error) { return 0, ErrUnsupported }

// Drop returns ErrUnsupported off Linux.
func Drop([]string) (uint64, error) { return 0, ErrUnsupported }

// Resident returns ErrUnsupported off Linux.
func Resident(string) (uint64, uint64, error) { return 0, 0, ErrUnsupported }
