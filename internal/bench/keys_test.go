package bench

import (
	"math"
	"testing"
)

// TestPickerZipf: the zipf pattern's most popular key is KeyMin, and key
// KeyMin+k-1 comes up in the share rank k has (within five standard
// errors; the sampler itself is tested in zipf_test.go).
func TestPickerZipf(t *testing.T) {
	const draws = 200_000
	c := (&Config{KeyMin: 100, KeyMax: 1099, Pattern: Zipf, ZipfAlpha: 0.8, Seed: 3}).withDefaults()
	p := newPicker(&c, 0, 1)
	count := map[uint64]int{}
	for range draws {
		k := p.key()
		if k < 100 || k > 1099 {
			t.Fatalf("key %d outside [100, 1099]", k)
		}
		count[k]++
	}
	probs := zipfProbs(0.8, 1000)
	for rank := 1; rank <= 5; rank++ {
		got, want := float64(count[uint64(99+rank)])/draws, probs[rank]
		if se := math.Sqrt(want * (1 - want) / draws); math.Abs(got-want) > 5*se {
			t.Errorf("key %d (rank %d): share %.4f, want %.4f", 99+rank, rank, got, want)
		}
	}
}

// TestPickerScan follows the scan pattern's cycle: ScanEvery-ScanLength
// Zipf keys, then ScanLength consecutive keys continuing the last scan,
// starting mid-range for a lone connection and spread over the range and
// the cycle for several.
func TestPickerScan(t *testing.T) {
	c := (&Config{KeyMax: 99, Pattern: Scan, ScanLength: 10, ScanEvery: 40, Seed: 1}).withDefaults()
	p := newPicker(&c, 0, 1)
	var scans []uint64
	for i := range 200 {
		k := p.key()
		inScan := i%40 >= 30
		if p.scanned != inScan {
			t.Fatalf("request %d: scanned %v, want %v", i, p.scanned, inScan)
		}
		if inScan {
			scans = append(scans, k)
		}
	}
	// Five scans of ten keys from 50, wrapping at 99.
	for i, k := range scans {
		if want := uint64(50+i) % 100; k != want {
			t.Fatalf("scan key %d is %d, want %d (scans %v)", i, k, want, scans)
		}
	}
	// Connection 1 of 2 starts its scan at 3/4 of the range and its cycle
	// half way through: its first scan key is its 11th request.
	p = newPicker(&c, 1, 2)
	for i := range 11 {
		k := p.key()
		if i < 10 && p.scanned {
			t.Fatalf("connection 1: request %d is a scan", i)
		}
		if i == 10 && (!p.scanned || k != 75) {
			t.Fatalf("connection 1: request 10 is key %d (scan %v), want 75 of a scan", k, p.scanned)
		}
	}
}

// TestPickerDoesNotAllocate: choosing a key allocates nothing, whatever the
// pattern (the hot loop calls it for every key).
func TestPickerDoesNotAllocate(t *testing.T) {
	for _, pat := range []Pattern{Uniform, Gaussian, Sequential, Zipf, Scan} {
		c := (&Config{KeyMax: 999_999, Pattern: pat, ScanLength: 100, ScanEvery: 300}).withDefaults()
		p := newPicker(&c, 0, 1)
		if n := testing.AllocsPerRun(10_000, func() { p.key() }); n != 0 {
			t.Errorf("%s: %.1f allocations per key", pat, n)
		}
	}
}

func TestPatternNames(t *testing.T) {
	for _, pat := range []Pattern{Uniform, Gaussian, Sequential, Zipf, Scan} {
		if got, err := ParsePattern(pat.String()); err != nil || got != pat {
			t.Errorf("ParsePattern(%q) = %v, %v", pat.String(), got, err)
		}
	}
	for _, bad := range []Config{
		{Servers: []string{"x:1"}, Pattern: Zipf, ZipfAlpha: -1},
		{Servers: []string{"x:1"}, Pattern: Zipf, ZipfAlpha: math.NaN()},
		{Servers: []string{"x:1"}, Pattern: Scan, ScanLength: 10, ScanEvery: 10},
	} {
		if err := bad.Validate(); err == nil {
			t.Errorf("%+v: valid", bad)
		}
	}
}
