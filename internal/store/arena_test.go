package store

import (
	"testing"
	"unsafe"
)

func TestArenaPages(t *testing.T) {
	s, err := New(Config{MaxBytes: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.pageMu.Lock()
	defer s.pageMu.Unlock()
	a := &s.arena
	addr := func(p []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(p))) }

	// Pages come in order from a mapping that starts on a huge page; the
	// first mapping holds arenaFirstMap bytes, the next one is new.
	var pages [][]byte
	for range arenaFirstMap/a.size + 1 {
		pages = append(pages, a.page())
	}
	if addr(pages[0])%hugePageSize != 0 {
		t.Errorf("first page at %#x, not on a huge page", addr(pages[0]))
	}
	for i, p := range pages {
		if len(p) != a.size || cap(p) != a.size {
			t.Fatalf("page %d: len %d cap %d", i, len(p), cap(p))
		}
		for _, b := range p[:4096] {
			if b != 0 {
				t.Fatalf("page %d is not zeroed", i)
			}
		}
		if i > 0 && i < arenaFirstMap/a.size && addr(p) != addr(pages[i-1])+uintptr(a.size) {
			t.Errorf("page %d not after page %d", i, i-1)
		}
	}
	last := pages[len(pages)-1]
	if addr(last)%hugePageSize != 0 {
		t.Errorf("the second mapping's first page at %#x", addr(last))
	}
	if len(*a.maps) != 2 {
		t.Errorf("%d mappings, want 2", len(*a.maps))
	}

	// A released page is the next one handed out, zeroed again.
	pages[1][0], pages[1][a.size-1] = 7, 7
	a.release(pages[1])
	if p := a.page(); addr(p) != addr(pages[1]) {
		t.Errorf("released page not reused")
	} else if p[0] != 0 || p[a.size-1] != 0 {
		t.Errorf("released page not zeroed")
	}
}
