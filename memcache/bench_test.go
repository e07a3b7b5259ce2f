package memcache

import (
	"os"
	"strconv"
	"sync"
	"testing"

	gomemcache "github.com/bradfitz/gomemcache/memcache"

	"github.com/vbcache/vbcache/test/nodeproc"
)

// The benchmarks run vbcache's client and gomemcache side by side against
// the same server process in the same run, so their ns/op and allocs/op
// compare directly (the server is a separate process: its allocations are
// not counted). The server is a vbcache node built from this module, or
// the one at $VBCACHE_BENCH_ADDR.
//
//	go test ./memcache -run '^$' -bench . -benchtime 2s
var (
	benchOnce sync.Once
	benchAddr string
	benchErr  error
	benchStop func()
)

func benchServer(b *testing.B) string {
	b.Helper()
	if a := os.Getenv("VBCACHE_BENCH_ADDR"); a != "" {
		return a
	}
	benchOnce.Do(func() {
		dir, err := os.MkdirTemp("", "vbcache-bench-")
		if err != nil {
			benchErr = err
			return
		}
		bin, err := nodeproc.BuildVbcache(dir)
		if err != nil {
			benchErr = err
			return
		}
		n, err := nodeproc.StartNoCleanup(nodeproc.Vbcache, bin, "-t", "2")
		if err != nil {
			benchErr = err
			return
		}
		benchAddr = n.Addr
		benchStop = func() { n.Stop(); os.RemoveAll(dir) }
	})
	if benchErr != nil {
		b.Fatal(benchErr)
	}
	return benchAddr
}

func TestMain(m *testing.M) {
	code := m.Run()
	if benchStop != nil {
		benchStop()
	}
	os.Exit(code)
}

var benchValue = make([]byte, 100)

const benchKeys = 1000

func benchKey(i int) string { return "bench:" + strconv.Itoa(i%benchKeys) }

// clients returns the two clients under test, with the keys loaded.
func benchClients(b *testing.B) (*Client, *gomemcache.Client) {
	addr := benchServer(b)
	ours := New(addr)
	theirs := gomemcache.New(addr)
	theirs.MaxIdleConns = 64 // give gomemcache the connections it needs in parallel
	for i := 0; i < benchKeys; i++ {
		if err := ours.Set(&Item{Key: benchKey(i), Value: benchValue}); err != nil {
			b.Fatal(err)
		}
	}
	b.Cleanup(func() { ours.Close(); theirs.Close() })
	return ours, theirs
}

func BenchmarkGet(b *testing.B) {
	ours, theirs := benchClients(b)
	b.Run("client=vbcache", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for i := 0; pb.Next(); i++ {
				it, err := ours.Get(benchKey(i))
				if err != nil || len(it.Value) != len(benchValue) {
					b.Fatalf("get: %v", err)
				}
			}
		})
	})
	b.Run("client=gomemcache", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for i := 0; pb.Next(); i++ {
				it, err := theirs.Get(benchKey(i))
				if err != nil || len(it.Value) != len(benchValue) {
					b.Fatalf("get: %v", err)
				}
			}
		})
	})
}

func BenchmarkSet(b *testing.B) {
	ours, theirs := benchClients(b)
	b.Run("client=vbcache", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			it := &Item{Value: benchValue}
			for i := 0; pb.Next(); i++ {
				it.Key = benchKey(i)
				if err := ours.Set(it); err != nil {
					b.Fatalf("set: %v", err)
				}
			}
		})
	})
	b.Run("client=gomemcache", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			it := &gomemcache.Item{Value: benchValue}
			for i := 0; pb.Next(); i++ {
				it.Key = benchKey(i)
				if err := theirs.Set(it); err != nil {
					b.Fatalf("set: %v", err)
				}
			}
		})
	})
}

func BenchmarkGetMulti100(b *testing.B) {
	ours, theirs := benchClients(b)
	keys := make([]string, 100)
	for i := range keys {
		keys[i] = benchKey(i * 7)
	}
	b.Run("client=vbcache", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				m, err := ours.GetMulti(keys)
				if err != nil || len(m) != 100 {
					b.Fatalf("getmulti: %d, %v", len(m), err)
				}
			}
		})
	})
	b.Run("client=gomemcache", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				m, err := theirs.GetMulti(keys)
				if err != nil || len(m) != 100 {
					b.Fatalf("getmulti: %d, %v", len(m), err)
				}
			}
		})
	})
}

// BenchmarkGetSerial is one goroutine, one request at a time: no
// pipelining to help.
func BenchmarkGetSerial(b *testing.B) {
	ours, theirs := benchClients(b)
	b.Run("client=vbcache", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			if _, err := ours.Get(benchKey(i)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("client=gomemcache", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			if _, err := theirs.Get(benchKey(i)); err != nil {
				b.Fatal(err)
			}
		}
	})
}
