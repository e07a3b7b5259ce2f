package store

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// A loan is item memory: loans stop at half the limit (the rest is for
// items), under -M the items then stop at the limit, and what is returned
// is reused.
func TestBorrowCountsAgainstLimit(t *testing.T) {
	s, _ := newTest(t, Config{MaxBytes: 4 << 20, NoEvict: true, VerifyFrees: true})
	const n = 100 << 10
	var loans []Loan
	for {
		b, l, err := s.Borrow(nil, n)
		if errors.Is(err, ErrNoMemory) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(b) < n {
			t.Fatalf("lent %d bytes, asked for %d", len(b), n)
		}
		for i := range b {
			b[i] = byte(len(loans))
		}
		loans = append(loans, l)
		if len(loans) > 64 {
			t.Fatalf("lent %d×%d bytes under a 4 MiB limit", len(loans), n)
		}
	}
	// Chunks of this class are a little over n: at most 20 in 2 MiB.
	if len(loans) < 15 || len(loans) > 2<<20/n {
		t.Fatalf("%d loans of %d bytes under a 4 MiB limit, want half of it", len(loans), n)
	}
	// Items of the same class take the rest, and no more.
	stored := 0
	for ; stored < 64; stored++ {
		err := set(t, s, fmt.Sprint("k", stored), strings.Repeat("v", n-100), 0)
		if errors.Is(err, ErrNoMemory) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if stored+len(loans) < 32 || stored+len(loans) > 4<<20/n {
		t.Fatalf("%d loans and %d items of %d bytes in 4 MiB", len(loans), stored, n)
	}
	for _, l := range loans {
		s.Return(l)
	}
	if _, l, err := s.Borrow(nil, n); err != nil {
		t.Fatalf("after the loans came back: %v", err)
	} else {
		s.Return(l)
	}
	var st Stats
	s.ReadStats(&st)
	if st.TotalMalloced > 4<<20 {
		t.Fatalf("total_malloced %d over the 4 MiB limit", st.TotalMalloced)
	}
	// One loan is granted whatever its size, even above half the limit.
	s2, _ := newTest(t, Config{MaxBytes: 1 << 20})
	_, l, err := s2.Borrow(nil, 600<<10)
	if err != nil {
		t.Fatalf("a 600 KB loan under -m 1: %v", err)
	}
	if _, _, err := s2.Borrow(nil, 20<<10); !errors.Is(err, ErrNoMemory) {
		t.Fatalf("a second loan past half of -m 1: %v, want ErrNoMemory", err)
	}
	s2.Return(l)
}

func TestBorrowEvicts(t *testing.T) {
	s, _ := newTest(t, Config{MaxBytes: 2 << 20, VerifyFrees: true})
	val := strings.Repeat("x", 60<<10)
	for i := 0; i < 100; i++ {
		mustSet(t, s, fmt.Sprint("k", i), val, 0)
	}
	var loans []Loan
	for i := 0; i < 10; i++ {
		_, l, err := s.Borrow(nil, len(val)) // 10 × 72 KB: under half of 2 MiB
		if err != nil {
			t.Fatalf("loan %d: %v", i, err)
		}
		loans = append(loans, l)
	}
	var st Stats
	s.ReadStats(&st)
	if st.Evictions == 0 || st.TotalMalloced > 2<<20 {
		t.Fatalf("evictions %d, total_malloced %d: loans must evict within the limit", st.Evictions, st.TotalMalloced)
	}
	// The newest items survive (LRU order), the loans take the oldest.
	wantGet(t, s, "k99", val, Hit)
	if _, out := get(s, "k0"); out != Miss {
		t.Fatalf("k0: %v, want evicted", out)
	}
	for _, l := range loans {
		s.Return(l)
	}
	mustSet(t, s, "after", val, 0)
}

// A page holding a loan is not emptied for another class: the loan's bytes
// stay the borrower's.
func TestBorrowedPageStays(t *testing.T) {
	s, _ := newTest(t, Config{MaxBytes: 2 << 20, VerifyFrees: true})
	b, l, err := s.Borrow(nil, 200<<10)
	if err != nil {
		t.Fatal(err)
	}
	for i := range b {
		b[i] = 0xa5
	}
	// Items of another class take every other page there is, and then
	// need page rescue, which must pass over the loan's page.
	small := strings.Repeat("s", 500)
	for i := 0; i < 5000; i++ {
		if err := set(t, s, fmt.Sprint("s", i), small, 0); err != nil && !errors.Is(err, ErrNoMemory) {
			t.Fatal(err)
		}
	}
	for i, x := range b {
		if x != 0xa5 {
			t.Fatalf("byte %d of the loan changed to %#x", i, x)
		}
	}
	s.Return(l)
	if _, _, err := s.Borrow(nil, s.BorrowMax()+1); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("a loan above BorrowMax: %v, want ErrTooLarge", err)
	}
}
