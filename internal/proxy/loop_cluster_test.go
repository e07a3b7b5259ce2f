package proxy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vbcache/vbcache/internal/admin"
	"github.com/vbcache/vbcache/internal/clock"
	"github.com/vbcache/vbcache/internal/protocol"
	"github.com/vbcache/vbcache/internal/server"
	"github.com/vbcache/vbcache/internal/server/servertest"
	"github.com/vbcache/vbcache/internal/vbmap"
	"github.com/vbcache/vbcache/internal/vbucket"
)

const testVBuckets = 64

// clusterFixture is in-process cluster nodes and the map the test keeps
// for them, standing in for the manager.
type clusterFixture struct {
	t      *testing.T
	addrs  []string
	admins []*admin.Conn
	cfg    *vbmap.Config
}

// newClusterFixture starts n nodes with the vbuckets spread over them,
// the map (rev 1) on each.
func newClusterFixture(t *testing.T, n int) *clusterFixture {
	x := &clusterFixture{t: t}
	for range n {
		cfg := server.Config{Version: "test",
			VBuckets: testVBuckets, VBucketParkTimeout: 100 * time.Millisecond}
		cfg.Store.Clock = clock.NewFake(time.Unix(1700000000, 0))
		addr := servertest.Start(t, cfg)
		a, err := admin.Dial(context.Background(), addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { a.Close() })
		x.addrs = append(x.addrs, addr)
		x.admins = append(x.admins, a)
	}
	x.cfg = vbmap.Spread(x.addrs, testVBuckets)
	for vb := range testVBuckets {
		x.state(x.cfg.Active(vb), vb, vbucket.Active)
	}
	x.push(nil)
	return x
}

func (x *clusterFixture) state(node, vb int, st vbucket.State) {
	x.t.Helper()
	if err := x.admins[node].SetVBucket(vb, st); err != nil {
		x.t.Fatal(err)
	}
}

// push stores the current map on the nodes (every node when to is nil).
func (x *clusterFixture) push(to []int) {
	x.t.Helper()
	if to == nil {
		for i := range x.admins {
			to = append(to, i)
		}
	}
	js, err := json.Marshal(x.cfg)
	if err != nil {
		x.t.Fatal(err)
	}
	for _, i := range to {
		if err := x.admins[i].SetClusterConfig(js, x.cfg.RevEpoch, x.cfg.Rev); err != nil {
			x.t.Fatal(err)
		}
	}
}

// move makes node to the active copy of vbs (the old owner dead first;
// no data moves) in the next revision of the map, not pushed yet.
func (x *clusterFixture) move(vbs []int, to int) {
	next := *x.cfg
	m := next.VBucketServerMap
	m.VBucketMap = nil
	for _, row := range x.cfg.VBucketServerMap.VBucketMap {
		m.VBucketMap = append(m.VBucketMap, append([]int(nil), row...))
	}
	for _, vb := range vbs {
		x.state(m.VBucketMap[vb][0], vb, vbucket.Dead)
		x.state(to, vb, vbucket.Active)
		m.VBucketMap[vb][0] = to
	}
	next.VBucketServerMap = m
	next.Rev++
	x.cfg = &next
}

// serveClusterProxy starts an in-process proxy over the cluster whose
// seeds are nodes.
func serveClusterProxy(t *testing.T, cc ClusterConfig) string {
	t.Helper()
	cfg := &Config{Listen: "127.0.0.1:0", Cluster: &cc}
	p, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	p.Logf = nil
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go p.Serve(ln)
	t.Cleanup(func() { p.Close() })
	return ln.Addr().String()
}

// keyOn returns a key of vbucket vb (and i: the i-th such key).
func keyOn(vb, i int) string {
	for n := 0; ; n++ {
		k := fmt.Sprintf("k%d-%d", i, n)
		if vbmap.VBucketString(k, testVBuckets) == vb {
			return k
		}
	}
}

// TestLoopClusterFollowsMoves: a cluster's clients, text, meta and
// binary, are served on the event loops, and when vbuckets move under
// them (the old owner refusing with NOT_MY_VBUCKET, the new map pushed
// to the new owner only, so that the proxy must fetch it) every request
// is answered by the new owner: writes land there, reads see them, a
// multi-key get over moved and unmoved vbuckets sees all its keys.
func TestLoopClusterFollowsMoves(t *testing.T) {
	x := newClusterFixture(t, 2)
	addr := serveClusterProxy(t, ClusterConfig{Nodes: x.addrs})
	nc, r := dialProxy(t, addr)
	say := func(req string, want ...string) {
		t.Helper()
		io.WriteString(nc, req)
		for _, w := range want {
			l, err := r.ReadString('\n')
			if err != nil || l != w {
				t.Fatalf("%q: got %q (%v), want %q", req, l, err, w)
			}
		}
	}
	// Node 0's vbuckets (the even ones) move to node 1.
	var moved, kept []string
	var movedVBs []int
	for vb := range testVBuckets {
		k := keyOn(vb, 0)
		if x.cfg.Active(vb) == 0 {
			moved = append(moved, k)
			movedVBs = append(movedVBs, vb)
		} else {
			kept = append(kept, k)
		}
		say("set "+k+" 0 0 2\r\nv1\r\n", "STORED\r\n")
	}
	fast := statValue(t, addr, "proxy_fast_path")
	x.move(movedVBs, 1)
	x.push([]int{1})
	for _, k := range moved {
		say("get "+k+"\r\n", "END\r\n") // the new owner starts empty
		say("set "+k+" 0 0 2\r\nv2\r\n", "STORED\r\n")
		say("ms "+k+" 2 T0\r\nv3\r\n", "HD\r\n")
		say("mg "+k+" v\r\n", "VA 2\r\n", "v3\r\n")
	}
	// Every moved key is on node 1 now, and only there.
	direct, err := net.Dial("tcp", x.addrs[1])
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	direct.SetDeadline(time.Now().Add(10 * time.Second))
	dr := bufio.NewReader(direct)
	for _, k := range moved {
		io.WriteString(direct, "get "+k+"\r\n")
		if l, _ := dr.ReadString('\n'); l != "VALUE "+k+" 0 2\r\n" {
			t.Fatalf("node 1 on %s: %q", k, l)
		}
		dr.ReadString('\n')
		dr.ReadString('\n')
	}
	// A multi-key get over both nodes' vbuckets.
	all := append(append([]string(nil), moved...), kept...)
	io.WriteString(nc, "get "+strings.Join(all, " ")+"\r\n")
	for _, k := range all {
		want := "v3"
		if !contains(moved, k) {
			want = "v1"
		}
		if l, _ := r.ReadString('\n'); l != "VALUE "+k+" 0 2\r\n" {
			t.Fatalf("multi-get, %s: %q", k, l)
		}
		if l, _ := r.ReadString('\n'); l != want+"\r\n" {
			t.Fatalf("multi-get, %s: %q, want %s", k, l, want)
		}
	}
	if l, _ := r.ReadString('\n'); l != "END\r\n" {
		t.Fatalf("multi-get end: %q", l)
	}

	// Binary: the moved keys back to node 0, the new map pushed to both
	// nodes this time, so the refusal's body teaches the proxy the map.
	x.move(movedVBs, 0)
	x.push(nil)
	bc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer bc.Close()
	bc.SetDeadline(time.Now().Add(30 * time.Second))
	for i, k := range moved {
		var req protocol.Request
		req.Opcode, req.Key, req.Value, req.Extras, req.Opaque = protocol.OpSet, []byte(k), []byte("b1"), make([]byte, 8), uint32(i)
		bc.Write(protocol.AppendRequest(nil, &req))
		if h, v := readBinary(t, bc); h.Status != protocol.StatusOK || h.Opaque != uint32(i) {
			t.Fatalf("binary set %s: status %#x %q", k, h.Status, v)
		}
		req = protocol.Request{}
		req.Opcode, req.Key, req.Opaque = protocol.OpGet, []byte(k), uint32(i)
		bc.Write(protocol.AppendRequest(nil, &req))
		if h, v := readBinary(t, bc); h.Status != protocol.StatusOK || !bytes.HasSuffix(v, []byte("b1")) {
			t.Fatalf("binary get %s: status %#x %q", k, h.Status, v)
		}
	}
	// Each request above (and those of the multi-key get's) was the
	// loops'.
	if got := statValue(t, addr, "proxy_fast_path") - fast; got < int64(5*len(moved)) {
		t.Errorf("proxy_fast_path grew by %d, want at least %d: the cluster's clients are not on the loops", got, 5*len(moved))
	}
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// readBinary reads one binary response: its header and its body.
func readBinary(t *testing.T, nc net.Conn) (protocol.Header, []byte) {
	t.Helper()
	var hb [protocol.HeaderLen]byte
	if _, err := io.ReadFull(nc, hb[:]); err != nil {
		t.Fatal(err)
	}
	var h protocol.Header
	if err := protocol.ParseHeader(hb[:], &h); err != nil {
		t.Fatal(err)
	}
	body := make([]byte, h.BodyLen)
	if _, err := io.ReadFull(nc, body); err != nil {
		t.Fatal(err)
	}
	return h, body
}

// TestLoopClusterRetryRunsOut: a vbucket with no active copy anywhere is
// refused by its node until the retry timeout, and then answered with
// SERVER_ERROR, within the timeout's time; a request for another
// vbucket, pipelined behind it, is answered after it.
func TestLoopClusterRetryRunsOut(t *testing.T) {
	x := newClusterFixture(t, 2)
	const retry = 300 * time.Millisecond
	addr := serveClusterProxy(t, ClusterConfig{Nodes: x.addrs, RetryTimeout: int(retry / time.Millisecond)})
	x.state(x.cfg.Active(5), 5, vbucket.Dead)
	nc, r := dialProxy(t, addr)
	start := time.Now()
	io.WriteString(nc, "set "+keyOn(5, 0)+" 0 0 1\r\nx\r\nset "+keyOn(6, 0)+" 0 0 1\r\ny\r\n")
	l, err := r.ReadString('\n')
	took := time.Since(start)
	if err != nil || !strings.HasPrefix(l, "SERVER_ERROR proxy upstream ") || !strings.Contains(l, "vbucket map did not settle") {
		t.Fatalf("set of a vbucket no node serves: %q %v", l, err)
	}
	// No retry starts later than the timeout after the request, and
	// the backoffs (10 ms, doubling) add up to more than a third of it
	// before the last one that fits.
	if took < retry/3 || took > 10*retry {
		t.Errorf("answered after %v, want within the retry timeout %v (and not at once)", took, retry)
	}
	if l, err := r.ReadString('\n'); l != "STORED\r\n" {
		t.Fatalf("the set behind it: %q %v", l, err)
	}
}

// fakeNode is a cluster node of the test's own, for failures a real
// node does not make: it answers GET_CLUSTER_CONFIG with a one-node map
// naming itself, and hands each text line it reads to its handler,
// which may answer or close the connection.
type fakeNode struct {
	ln   net.Listener
	mu   sync.Mutex // protects got
	got  []string
	line func(nc net.Conn, line string, n int) bool // false: close
}

func startFakeNode(t *testing.T, line func(nc net.Conn, line string, n int) bool) *fakeNode {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeNode{ln: ln, line: line}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { f.serve(nc) })
		}
	})
	return f
}

func (f *fakeNode) serve(nc net.Conn) {
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(30 * time.Second))
	r := bufio.NewReader(nc)
	for {
		b, err := r.Peek(1)
		if err != nil {
			return
		}
		if b[0] == protocol.MagicRequest {
			var hb [protocol.HeaderLen]byte
			if _, err := io.ReadFull(r, hb[:]); err != nil {
				return
			}
			var h protocol.Header
			protocol.ParseHeader(hb[:], &h)
			io.CopyN(io.Discard, r, int64(h.BodyLen))
			js, _ := json.Marshal(vbmap.Spread([]string{f.ln.Addr().String()}, testVBuckets))
			nc.Write(protocol.AppendResponse(nil, h.Opcode, protocol.StatusOK, h.Opaque, 0, nil, nil, js))
			continue
		}
		l, err := r.ReadString('\n')
		if err != nil {
			return
		}
		if strings.HasPrefix(l, "set ") {
			r.ReadString('\n') // the data
		}
		f.mu.Lock()
		f.got = append(f.got, strings.TrimSpace(l))
		n := len(f.got)
		f.mu.Unlock()
		if !f.line(nc, l, n) {
			return
		}
	}
}

func (f *fakeNode) received() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.got...)
}

// TestLoopClusterSendsWritesOnce: issue 21's rule on the loops. A node
// that takes a request and drops its connection without an answer may
// have applied it: a get is sent again (and answered), a set is not (the
// client gets SERVER_ERROR, and the node saw it once).
func TestLoopClusterSendsWritesOnce(t *testing.T) {
	f := startFakeNode(t, func(nc net.Conn, l string, n int) bool {
		if n == 1 || strings.HasPrefix(l, "set ") {
			return false // the first request, and every set: no answer
		}
		io.WriteString(nc, "END\r\n")
		return true
	})
	addr := serveClusterProxy(t, ClusterConfig{Nodes: []string{f.ln.Addr().String()}, RetryTimeout: 2000})
	nc, r := dialProxy(t, addr)
	io.WriteString(nc, "get a\r\n")
	if l, err := r.ReadString('\n'); l != "END\r\n" {
		t.Fatalf("get after a lost connection: %q %v", l, err)
	}
	io.WriteString(nc, "set b 0 0 1\r\nx\r\n")
	if l, err := r.ReadString('\n'); !strings.HasPrefix(l, "SERVER_ERROR proxy upstream ") {
		t.Fatalf("set after a lost connection: %q %v, want SERVER_ERROR", l, err)
	}
	got := f.received()
	sets := 0
	for _, l := range got {
		if strings.HasPrefix(l, "set ") {
			sets++
		}
	}
	if sets != 1 || len(got) < 3 || got[0] != "get a" || got[1] != "get a" {
		t.Errorf("the node received %q; want the get twice and the set once", got)
	}
}
