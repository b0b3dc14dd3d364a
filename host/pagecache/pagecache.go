// Package pagecache reads model weight files ahead into the kernel's page
// cache before a load, drops them from it, and measures how much of a file
// it holds (DESIGN.md, "Residency": a stopped model's weights, read ahead,
// make its next cold load a load from memory instead of from disk).
//
// The kernel does most of the work: posix_fadvise(POSIX_FADV_WILLNEED)
// starts reading the whole file (Warm then reads it through, so that it
// is all there when Warm returns), POSIX_FADV_DONTNEED evicts its clean
// pages, and mincore(2) on a read-only mapping reports which pages are
// resident. None needs privileges. Linux only; elsewhere every
// function returns ErrUnsupported.
package pagecache

import "errors"

// ErrUnsupported is returned where the kernel offers no page-cache advice.
var ErrUnsupported = errors.New("pagecache: not supported on this platform")
