package store

import (
	"runtime"
	"syscall"
	"unsafe"
)

// Slab pages of the standard size come from an arena: anonymous mappings,
// aligned to 2 MiB and advised MADV_HUGEPAGE, cut into pages in order.
// Items are reached at random, so on 4 KiB pages nearly every lookup of a
// large cache misses the TLB as well as the caches; on 2 MiB pages a
// gigabyte is 512 TLB entries (BenchmarkGetSpread: a random get among a
// million items is about 14% cheaper). memcached does the same under -L,
// where it also allocates the whole -m at start; the arena maps as the
// cache grows, and the kernel backs a huge page when it is first touched,
// so a cache holds at most one partly used huge page more than it fills.
// With transparent huge pages off (or -o no_hugepages) the advice is not
// given and the pages are ordinary.
//
// The arena is protected by Store.pageMu. Its mappings stay while the
// Store lives (memcached keeps its slabs too); a released page (one moved
// to a class of another page size) gives its memory back to the kernel
// and is reused first.
// The mappings are unmapped by a cleanup once the Store is unreachable,
// as the index tables are: a page's bytes are valid only while the Store
// is, which the Tx contract (a value is valid until End) already demands.
type pageArena struct {
	size   int      // bytes per page
	noHuge bool     // do not advise huge pages
	rest   []byte   // the unused tail of the newest mapping
	next   int      // bytes of the next mapping
	free   [][]byte // released pages, reused first
	maps   *[][]byte
}

const (
	hugePageSize   = 2 << 20
	arenaFirstMap  = 4 << 20  // the first mapping; each next one doubles…
	arenaMaxMap    = 64 << 20 // …up to this
	madvHugePage   = 14       // MADV_HUGEPAGE (linux)
	arenaMapsLimit = 1 << 16  // mappings tracked; more fall back to the heap
)

func newPageArena(s *Store, size int, noHuge bool) pageArena {
	maps := new([][]byte)
	runtime.AddCleanup(s, func(maps *[][]byte) {
		for _, m := range *maps {
			syscall.Munmap(m)
		}
		*maps = nil
	}, maps)
	return pageArena{size: size, noHuge: noHuge, next: arenaFirstMap, maps: maps}
}

// page returns a zeroed page of a.size bytes.
func (a *pageArena) page() []byte {
	if n := len(a.free); n > 0 {
		p := a.free[n-1]
		a.free[n-1] = nil
		a.free = a.free[:n-1]
		return p
	}
	if len(a.rest) < a.size && !a.grow() {
		return make([]byte, a.size)
	}
	p := a.rest[:a.size:a.size]
	a.rest = a.rest[a.size:]
	return p
}

// release takes back a page of a.size bytes that left its class (for a
// class of another page size, whose pages are not the arena's). Its memory
// goes back to the kernel (MADV_DONTNEED), so the page costs nothing until
// it is reused, and then reads as zeros, as a new page does: a class may
// take it up with another chunk size, and nothing of the old layout may
// show through.
func (a *pageArena) release(p []byte) {
	if len(p)%4096 != 0 || syscall.Madvise(p, syscall.MADV_DONTNEED) != nil {
		clear(p)
	}
	a.free = append(a.free, p)
}

// grow maps the next stretch of the arena: a.next bytes (at least one
// page) rounded up to huge pages, starting on a huge-page boundary.
func (a *pageArena) grow() bool {
	if len(*a.maps) >= arenaMapsLimit {
		return false
	}
	n := (max(a.next, a.size) + hugePageSize - 1) &^ (hugePageSize - 1)
	m, err := syscall.Mmap(-1, 0, n+hugePageSize, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	if err != nil {
		return false
	}
	*a.maps = append(*a.maps, m)
	off := int(-uintptr(unsafe.Pointer(unsafe.SliceData(m))) & (hugePageSize - 1))
	a.rest = m[off : off+n : off+n]
	if !a.noHuge {
		// Advice only: a kernel without transparent huge pages refuses
		// it, and the pages stay small.
		syscall.Madvise(a.rest, madvHugePage)
	}
	a.next = min(2*a.next, arenaMaxMap)
	return true
}
