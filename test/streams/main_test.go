// Package streams checks vbucket moves and replication between real
// vbcache node processes (test/nodeproc): the takeover checker
// (internal/movecheck) under load, replicas catching up from the log and
// from a backfill, star and chained replication, promotion after the
// active is killed, the lag figures of "stats streams", and (with -long)
// the move throughput and the latency clients see during a move.
//
// The default run is CI-short. `go test ./test/streams -long` (or
// VBCACHE_LONG=1) runs the long checker and the throughput test; their
// results are recorded in docs/PERFORMANCE.md ("Streams").
package streams

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vbcache/vbcache/internal/admin"
	"github.com/vbcache/vbcache/internal/protocol"
	"github.com/vbcache/vbcache/internal/vbmap"
	"github.com/vbcache/vbcache/internal/vbucket"
	"github.com/vbcache/vbcache/test/nodeproc"
)

var longFlag = flag.Bool("long", false, "run the long checker and the throughput test (also VBCACHE_LONG=1)")

// long reports whether the long tests run.
func long() bool { return *longFlag || os.Getenv("VBCACHE_LONG") == "1" }

// tagsFlag builds the vbcache under test with build tags: a
// vbcache_unsafe_* tag shows that a test catches the hole it turns back
// on (go test ./test/streams -run X -args -vbcache-tags=vbcache_unsafe_syncreads).
var tagsFlag = flag.String("vbcache-tags", "", "comma-separated build tags for the vbcache under test")

var bin string

func TestMain(m *testing.M) {
	flag.Parse()
	dir, err := os.MkdirTemp("", "vbcache-streams")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	var tags []string
	if *tagsFlag != "" {
		tags = strings.Split(*tagsFlag, ",")
	}
	bin, err = nodeproc.BuildVbcacheTags(dir, tags...)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// numVBuckets is the nodes' --vbuckets.
const numVBuckets = 64

// startNodes starts n cluster-mode nodes with the extra flags.
func startNodes(t testing.TB, n int, flags ...string) []*nodeproc.Node {
	t.Helper()
	var out []*nodeproc.Node
	for range n {
		out = append(out, nodeproc.Start(t, nodeproc.Vbcache, bin, append([]string{"--vbuckets", strconv.Itoa(numVBuckets)}, flags...)...))
	}
	return out
}

func addrs(nodes []*nodeproc.Node) []string {
	var a []string
	for _, n := range nodes {
		a = append(a, n.Addr)
	}
	return a
}

// ctl is a control connection that fails the test on error.
type ctl struct {
	t testing.TB
	*admin.Conn
}

func dialCtl(t testing.TB, addr string) *ctl {
	t.Helper()
	c, err := nodeproc.DialAdmin(context.Background(), addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &ctl{t, c}
}

func (c *ctl) must(err error, what string) {
	c.t.Helper()
	if err != nil {
		c.t.Fatalf("%s on %s: %v", what, c.Addr, err)
	}
}

func (c *ctl) setState(vb int, st vbucket.State) {
	c.t.Helper()
	c.must(c.SetVBucket(vb, st), fmt.Sprintf("SET_VBUCKET %d %v", vb, st))
}

func (c *ctl) state(vb int) vbucket.State {
	c.t.Helper()
	st, err := c.GetVBucket(vb)
	c.must(err, "GET_VBUCKET")
	return st
}

func (c *ctl) set(vb int, key, val string) {
	c.t.Helper()
	_, err := c.Do(protocol.OpSet, uint16(vb), make([]byte, 8), []byte(key), []byte(val))
	c.must(err, "SET "+key)
}

func (c *ctl) del(vb int, key string) {
	c.t.Helper()
	_, err := c.Do(protocol.OpDelete, uint16(vb), nil, []byte(key), nil)
	c.must(err, "DELETE "+key)
}

// getOp reads key with op (GET on an active copy, GET_REPLICA on a
// replica); ok is false for a miss.
func (c *ctl) getOp(op protocol.Opcode, vb int, key string) (string, bool) {
	c.t.Helper()
	v, err := c.Do(op, uint16(vb), nil, []byte(key), nil)
	if admin.IsStatus(err, protocol.StatusKeyNotFound) {
		return "", false
	}
	c.must(err, fmt.Sprintf("opcode %#x %s", uint8(op), key))
	return string(v), true
}

// stats returns a stats group as a map.
func (c *ctl) stats(group string) map[string]string {
	c.t.Helper()
	lines, err := c.Stats(group)
	c.must(err, "stats "+group)
	m := map[string]string{}
	for _, l := range lines {
		m[l[0]] = l[1]
	}
	return m
}

// pushConfig stores cfg on every node.
func pushConfig(t testing.TB, nodes []string, cfg *vbmap.Config) {
	t.Helper()
	js, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range nodes {
		c := dialCtl(t, a)
		c.must(c.SetClusterConfig(js, cfg.RevEpoch, cfg.Rev), "SET_CLUSTER_CONFIG")
		c.Close()
	}
}

// keysFor returns n keys of vbucket vb.
func keysFor(prefix string, vb, n int) []string {
	var out []string
	for i := 0; len(out) < n; i++ {
		k := prefix + strconv.Itoa(i)
		if vbmap.VBucketString(k, numVBuckets) == vb {
			out = append(out, k)
		}
	}
	return out
}

// eventually polls cond every 10 ms for up to d (a bounded wait on other
// processes, as nodeproc waits for a port) and fails with cond's last
// message when it never holds.
func eventually(t testing.TB, d time.Duration, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		ok, msg := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", d, msg)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// streamStat returns one "stats streams" figure whose name ends with
// suffix and contains part (e.g. the vbucket), and whether there is one.
func streamStat(m map[string]string, part, suffix string) (string, bool) {
	for k, v := range m {
		if strings.Contains(k, part) && strings.HasSuffix(k, suffix) {
			return v, true
		}
	}
	return "", false
}
