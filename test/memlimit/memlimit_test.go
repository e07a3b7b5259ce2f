// Package memlimit checks that a node honours its memory limit (-m) under a
// load four times larger than the limit: resident memory stays bounded,
// items are evicted, and whatever is still served is exactly what was
// stored. The same load runs against memcached for comparison; both RSS
// figures are logged. halfsent_test.go holds values back instead: many
// connections each one byte short of a large SET, whose buffers must be
// within -m too.
package memlimit

import (
	"bufio"
	"bytes"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vbcache/vbcache/test/nodeproc"
)

const (
	limitMiB = 8 // the node's -m
	loadMiB  = 4 * limitMiB

	// rssOverhead is what a vbcache node may hold beyond -m: the Go
	// runtime and its heap target (GOGC lets the heap grow to twice the
	// live heap), goroutine stacks, the hash index (a uint64 per item plus
	// per-shard maps, well under 1 MiB at a few thousand items), read and
	// write buffers of the connection (values up to 100 KB pass through
	// them), and the binary's own text and data (~10 MiB mapped, ~5 MiB
	// resident). Measured on linux/amd64 (see the t.Logf lines): VmRSS
	// 22 MiB at -m 8, i.e. about 14 MiB over -m (memcached 1.6.18 reaches
	// 34 MiB under the same load: each slab class takes its first page
	// outside the limit). 40 MiB leaves room for allocator slack without
	// letting an unbounded store (32 MiB of values alone, plus copies) pass.
	rssOverhead = 40 << 20

	minSize = 100
	maxSize = 100 << 10
)

var (
	vbcacheBin string
	buildErr   error
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "vbcache-memlimit-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	vbcacheBin, buildErr = nodeproc.BuildVbcache(dir)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// value returns the value stored under key: a header naming the key, the
// size and a CRC of the payload, then a payload derived from the key.
func value(key string, size int) []byte {
	seed := crc32.ChecksumIEEE([]byte(key))
	r := rand.New(rand.NewPCG(uint64(seed), uint64(size)))
	payload := make([]byte, size)
	for i := range payload {
		payload[i] = byte(r.Uint32())
	}
	hdr := fmt.Sprintf("%s|%d|%08x|", key, size, crc32.ChecksumIEEE(payload))
	v := append([]byte(hdr), payload...)
	return v[:size] // the header eats into the payload; the CRC still binds it to key and size
}

// workload returns keys and sizes (log-uniform between minSize and maxSize)
// totalling loadMiB.
func workload() (keys []string, sizes []int) {
	r := rand.New(rand.NewPCG(1, 2))
	total := 0
	for i := 0; total < loadMiB<<20; i++ {
		size := int(math.Exp(math.Log(minSize) + r.Float64()*(math.Log(maxSize)-math.Log(minSize))))
		keys = append(keys, fmt.Sprintf("ml:%d", i))
		sizes = append(sizes, size)
		total += size
	}
	return keys, sizes
}

type client struct {
	c net.Conn
	r *bufio.Reader
	w *bufio.Writer
}

func dial(t *testing.T, addr string) *client {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(2 * time.Minute))
	return &client{c: c, r: bufio.NewReaderSize(c, 256<<10), w: bufio.NewWriterSize(c, 256<<10)}
}

func (c *client) line(t *testing.T) string {
	l, err := c.r.ReadString('\n')
	if err != nil {
		t.Fatalf("read: %v (got %q)", err, l)
	}
	return strings.TrimSuffix(l, "\r\n")
}

func (c *client) stats(t *testing.T) map[string]string {
	fmt.Fprintf(c.w, "stats\r\n")
	c.w.Flush()
	m := map[string]string{}
	for {
		l := c.line(t)
		if l == "END" {
			return m
		}
		f := strings.SplitN(l, " ", 3)
		if len(f) == 3 && f[0] == "STAT" {
			m[f[1]] = f[2]
		}
	}
}

type result struct {
	rss, hwm           int64
	sets, hits, misses int
	evictions, noMem   int64
	moveEvictions      int64 // slab_reassign_evictions_nomem: evicted while moving a page between classes
	tooLarge, cur      int64
	limitMaxbytes      string
}

func load(t *testing.T, n *nodeproc.Node) result {
	keys, sizes := workload()
	c := dial(t, n.Addr)
	// Pipelined noreply sets, synchronized every 64 with a get of a
	// missing key, so the server never has more than a few MB in flight.
	for i, k := range keys {
		fmt.Fprintf(c.w, "set %s 0 0 %d noreply\r\n", k, sizes[i])
		c.w.Write(value(k, sizes[i]))
		c.w.WriteString("\r\n")
		if i%64 == 63 || i == len(keys)-1 {
			c.w.WriteString("get ml:sync\r\n")
			if err := c.w.Flush(); err != nil {
				t.Fatal(err)
			}
			if l := c.line(t); l != "END" {
				t.Fatalf("after set #%d: unexpected reply %q (a noreply set failed?)", i, l)
			}
		}
	}
	var res result
	var err error
	if res.rss, err = n.RSS(); err != nil {
		t.Fatal(err)
	}
	res.hwm = hwm(t, n.Pid())

	// Read everything back in multi-gets of 50 keys.
	for i := 0; i < len(keys); i += 50 {
		batch := keys[i:min(i+50, len(keys))]
		fmt.Fprintf(c.w, "get %s\r\n", strings.Join(batch, " "))
		c.w.Flush()
		seen := map[string]bool{}
		for {
			l := c.line(t)
			if l == "END" {
				break
			}
			f := strings.Fields(l)
			if len(f) != 4 || f[0] != "VALUE" {
				t.Fatalf("bad reply line %q", l)
			}
			sz, err := strconv.Atoi(f[3])
			if err != nil {
				t.Fatalf("bad size in %q", l)
			}
			data := make([]byte, sz+2)
			if _, err := io.ReadFull(c.r, data); err != nil {
				t.Fatal(err)
			}
			k := f[1]
			idx, err := strconv.Atoi(strings.TrimPrefix(k, "ml:"))
			if err != nil || idx < 0 || idx >= len(keys) || seen[k] {
				t.Fatalf("unexpected or repeated key %q", k)
			}
			seen[k] = true
			if want := value(k, sizes[idx]); !bytes.Equal(data[:sz], want) || string(data[sz:]) != "\r\n" {
				t.Fatalf("key %s: value differs from what was stored (len %d, want %d; starts %q)",
					k, sz, len(want), data[:min(40, sz)])
			}
		}
		res.hits += len(seen)
		res.misses += len(batch) - len(seen)
	}
	st := c.stats(t)
	res.evictions, _ = strconv.ParseInt(st["evictions"], 10, 64)
	res.noMem, _ = strconv.ParseInt(st["store_no_memory"], 10, 64)
	res.moveEvictions, _ = strconv.ParseInt(st["slab_reassign_evictions_nomem"], 10, 64)
	res.tooLarge, _ = strconv.ParseInt(st["store_too_large"], 10, 64)
	res.cur, _ = strconv.ParseInt(st["curr_items"], 10, 64)
	res.limitMaxbytes = st["limit_maxbytes"]
	res.sets = len(keys)
	if rss, err := n.RSS(); err == nil && rss > res.rss {
		res.rss = rss
	}
	if h := hwm(t, n.Pid()); h > res.hwm {
		res.hwm = h
	}
	t.Logf("%s -m %d: %d sets (%d MiB), hits %d, misses %d; stats: curr_items %d evictions %d slab_reassign_evictions_nomem %d store_no_memory %d store_too_large %d; VmRSS %.1f MiB, VmHWM %.1f MiB",
		n.Kind, limitMiB, len(keys), loadMiB, res.hits, res.misses, res.cur, res.evictions, res.moveEvictions, res.noMem, res.tooLarge,
		float64(res.rss)/(1<<20), float64(res.hwm)/(1<<20))
	return res
}

func hwm(t *testing.T, pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				kb, _ := strconv.ParseInt(f[0], 10, 64)
				return kb << 10
			}
		}
	}
	return 0
}

func check(t *testing.T, r result) {
	if r.limitMaxbytes != strconv.Itoa(limitMiB<<20) {
		t.Errorf("stats limit_maxbytes = %s, want %d", r.limitMaxbytes, limitMiB<<20)
	}
	if r.evictions <= 0 {
		t.Errorf("stats evictions = %d after storing %d MiB into -m %d", r.evictions, loadMiB, limitMiB)
	}
	if r.hits == 0 {
		t.Errorf("no item survived")
	}
	if int64(r.hits) != r.cur {
		t.Errorf("%d gets hit but stats curr_items = %d", r.hits, r.cur)
	}
	// Every set (of a distinct key, nothing expires) ends up in exactly one
	// place: still stored, evicted from an LRU tail, evicted while a slab
	// page moved to another class, or refused.
	if got := r.cur + r.evictions + r.moveEvictions + r.noMem + r.tooLarge; got != int64(r.sets) {
		t.Errorf("accounting: curr_items %d + evictions %d + slab_reassign_evictions_nomem %d + store_no_memory %d + store_too_large %d = %d, want %d sets",
			r.cur, r.evictions, r.moveEvictions, r.noMem, r.tooLarge, got, r.sets)
	}
	if limit := int64(limitMiB<<20) + rssOverhead; r.rss > limit {
		t.Errorf("VmRSS %.1f MiB exceeds -m %d MiB + overhead %d MiB", float64(r.rss)/(1<<20), limitMiB, rssOverhead>>20)
	}
}

func TestMemoryLimitVbcache(t *testing.T) {
	if buildErr != nil {
		t.Fatalf("cannot build vbcache: %v", buildErr)
	}
	n := nodeproc.Start(t, nodeproc.Vbcache, vbcacheBin, "-m", strconv.Itoa(limitMiB))
	check(t, load(t, n))
}

// TestMemoryLimitMemcached runs the same load against memcached: it proves
// the test's expectations are reachable and gives the RSS to compare with.
func TestMemoryLimitMemcached(t *testing.T) {
	if _, err := exec.LookPath("memcached"); err != nil {
		nodeproc.Absent(t, "memcached not found in PATH (package memcached)")
	}
	n := nodeproc.Start(t, nodeproc.Memcached, "", "-m", strconv.Itoa(limitMiB))
	check(t, load(t, n))
}
