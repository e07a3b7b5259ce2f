package server

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vbcache/vbcache/internal/admin"
	"github.com/vbcache/vbcache/internal/protocol"
	"github.com/vbcache/vbcache/internal/vbmap"
	"github.com/vbcache/vbcache/internal/vbucket"
)

// grant sends LEASE: d, grant seq of epoch, running from grant acked.
func (b *binClient) grant(d time.Duration, epoch, seq, acked uint64, self string, quorum ...string) protocol.Status {
	b.t.Helper()
	ex := make([]byte, 28)
	binary.BigEndian.PutUint32(ex, uint32(d/time.Millisecond))
	binary.BigEndian.PutUint64(ex[4:], epoch)
	binary.BigEndian.PutUint64(ex[12:], seq)
	binary.BigEndian.PutUint64(ex[20:], acked)
	h, _ := b.do(protocol.OpLease, 0, ex, []byte(self), []byte(strings.Join(quorum, ",")))
	return h.Status
}

// getStatus is a GET's status for key in vb.
func (b *binClient) getStatus(vb uint16, key string) protocol.Status {
	b.t.Helper()
	h, _ := b.do(protocol.OpGet, vb, nil, []byte(key), nil)
	return h.Status
}

// leaseStats returns the lease lines of "stats vbucket".
func (b *binClient) leaseStats() map[string]string {
	b.t.Helper()
	b.send(protocol.OpStat, 0, nil, []byte("vbucket"), nil)
	out := map[string]string{}
	for {
		h, body := b.read()
		if h.KeyLen == 0 {
			return out
		}
		k := string(body[h.ExtLen : int(h.ExtLen)+int(h.KeyLen)])
		if strings.HasPrefix(k, "lease_") {
			out[k] = string(body[int(h.ExtLen)+int(h.KeyLen):])
		}
	}
}

// waitStatus polls GET until it answers want, for at most d.
func (b *binClient) waitStatus(vb uint16, key string, want protocol.Status, d time.Duration) {
	b.t.Helper()
	for deadline := time.Now().Add(d); ; time.Sleep(5 * time.Millisecond) {
		if st := b.getStatus(vb, key); st == want {
			return
		} else if time.Now().After(deadline) {
			b.t.Fatalf("GET in vbucket %d: status %#x after %v, want %#x", vb, st, d, want)
		}
	}
}

// TestLeaseGrants: lease mode starts with the first grant; a grant's
// lease runs from the grant it names, so the first grant of an epoch (and
// one naming a grant the node never handled) gives none; a stale grant is
// ignored; a node without a lease answers TMPFAIL with its config and
// counts it.
func TestLeaseGrants(t *testing.T) {
	_, addr := startCluster(t, nil)
	b := dialBin(t, addr)
	b.setState(3, vbucket.Active)
	key := keyFor(t, 3)
	if st := b.getStatus(3, key); st != protocol.StatusKeyNotFound {
		t.Fatalf("before any grant: status %#x, want served (not found)", st)
	}
	const L = 800 * time.Millisecond
	// The quorum set has a second member that never answers, so the
	// node alone is no majority and gets no lease from its peers.
	const gone = "127.0.0.1:1"
	if st := b.grant(L, 7, 1, 0, addr, addr, gone); st != protocol.StatusOK {
		t.Fatalf("LEASE: status %#x", st)
	}
	if st := b.getStatus(3, key); st != protocol.StatusTmpFail {
		t.Fatalf("after a first grant (it names none): status %#x, want TMPFAIL", st)
	}
	if st := b.grant(L, 7, 2, 1, addr, addr, gone); st != protocol.StatusOK {
		t.Fatalf("LEASE: status %#x", st)
	}
	if st := b.getStatus(3, key); st != protocol.StatusKeyNotFound {
		t.Fatalf("after grant 2 naming 1: status %#x, want served", st)
	}
	if s := b.leaseStats(); s["lease_manager_ms_left"] == "0" || s["lease_from_peers"] != "0" {
		t.Fatalf("stats vbucket: %v", s)
	}
	// A grant naming one the node never handled extends nothing; a stale
	// one (an old number) is ignored: the lease runs out as it would.
	b.grant(L, 7, 4, 3, addr, addr, gone)
	b.grant(L, 7, 2, 1, addr, addr, gone)
	b.waitStatus(3, key, protocol.StatusTmpFail, 5*time.Second)
	if s := b.leaseStats(); s["lease_refused"] == "0" || s["lease_ms_left"] != "0" {
		t.Fatalf("stats vbucket after the lease ran out: %v", s)
	}
	// The TMPFAIL carries the node's config.
	cfg := terseConfig(t, []string{addr}, 5)
	if h, _ := b.do(protocol.OpSetClusterConfig, 0, revExtras(0, 5), []byte("default"), cfg); h.Status != protocol.StatusOK {
		t.Fatalf("SET_CLUSTER_CONFIG: %#x", h.Status)
	}
	if h, body := b.do(protocol.OpGet, 3, nil, []byte(key), nil); h.Status != protocol.StatusTmpFail || !strings.Contains(string(body), `"rev":5`) {
		t.Fatalf("GET without a lease: status %#x body %q", h.Status, body)
	}
	// A new epoch (a new leader) starts afresh.
	b.grant(L, 8, 1, 0, addr, addr, gone)
	b.grant(L, 8, 2, 1, addr, addr, gone)
	if st := b.getStatus(3, key); st != protocol.StatusKeyNotFound {
		t.Fatalf("after the new epoch's grant 2: status %#x, want served", st)
	}
	// Bad grants are refused.
	for _, bad := range []struct {
		seq, acked uint64
		d          time.Duration
	}{{0, 0, L}, {3, 3, L}, {3, 2, 0}, {3, 2, time.Hour}} {
		if st := b.grant(bad.d, 8, bad.seq, bad.acked, addr, addr, gone); st != protocol.StatusInvalid {
			t.Errorf("LEASE seq %d acked %d d %v: status %#x, want Invalid", bad.seq, bad.acked, bad.d, st)
		}
	}
}

// TestLeaseAnswer: a grant's answer is the node's incarnation, the
// number of vbuckets it holds as active, replica or pending and the
// number it holds active (golden bytes); a stale grant is answered alike, a malformed one with Invalid
// arguments; admin.Conn.Lease reads it; a node restarted at the same
// address answers with another incarnation, holding nothing.
func TestLeaseAnswer(t *testing.T) {
	s, stop, done := runServer(t, func(c *Config) { c.VBuckets = testVBuckets })
	addr := s.Addrs()[0].String()
	b := dialBin(t, addr)
	inc := s.cl.incarnation
	if inc == 0 {
		t.Fatal("incarnation 0")
	}
	grant := func(seq, acked uint64) (protocol.Header, []byte) {
		ex := make([]byte, 28)
		binary.BigEndian.PutUint32(ex, 1000)
		binary.BigEndian.PutUint64(ex[4:], 7)
		binary.BigEndian.PutUint64(ex[12:], seq)
		binary.BigEndian.PutUint64(ex[20:], acked)
		h, body := b.do(protocol.OpLease, 0, ex, []byte(addr), []byte(addr))
		return h, body[int(h.ExtLen)+int(h.KeyLen):]
	}
	want := func(held, active uint32) []byte {
		return []byte{
			byte(inc >> 56), byte(inc >> 48), byte(inc >> 40), byte(inc >> 32), // incarnation
			byte(inc >> 24), byte(inc >> 16), byte(inc >> 8), byte(inc),
			byte(held >> 24), byte(held >> 16), byte(held >> 8), byte(held), // vbuckets held
			byte(active >> 24), byte(active >> 16), byte(active >> 8), byte(active), // of them active
		}
	}
	if h, v := grant(1, 0); h.Status != protocol.StatusOK || !bytes.Equal(v, want(0, 0)) {
		t.Fatalf("first grant: status %#x value % x, want % x", h.Status, v, want(0, 0))
	}
	b.setState(1, vbucket.Active)
	b.setState(2, vbucket.Replica)
	b.setState(3, vbucket.Pending)
	b.setState(4, vbucket.Dead)
	b.setState(uint16(testVBuckets-1), vbucket.Active)
	if h, v := grant(2, 1); h.Status != protocol.StatusOK || !bytes.Equal(v, want(4, 2)) {
		t.Fatalf("grant with 4 held, 2 active: status %#x value % x, want % x", h.Status, v, want(4, 2))
	}
	if h, v := grant(1, 0); h.Status != protocol.StatusOK || !bytes.Equal(v, want(4, 2)) {
		t.Fatalf("stale grant: status %#x value % x, want % x", h.Status, v, want(4, 2))
	}
	if h, v := grant(3, 3); h.Status != protocol.StatusInvalid || string(v) != protocol.StatusInvalid.Text() {
		t.Fatalf("malformed grant: status %#x value %q, want Invalid and its text", h.Status, v)
	}
	c, err := admin.Dial(context.Background(), addr)
	if err != nil {
		t.Fatal(err)
	}
	a, err := c.Lease(time.Second, 7, 4, 2, addr, []string{addr})
	c.Close()
	if err != nil || a != (admin.LeaseAnswer{Known: true, Incarnation: inc, Held: 4, Actives: 2, ActivesKnown: true}) {
		t.Fatalf("admin Lease: %+v, %v", a, err)
	}

	// Restarted at the same address: another incarnation, nothing held.
	stop()
	if err := <-done; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	_, port, _ := net.SplitHostPort(addr)
	s2, _ := startCluster(t, func(c *Config) { c.Port, _ = strconv.Atoi(port) })
	if got := s2.Addrs()[0].String(); got != addr {
		t.Fatalf("restarted at %s, not %s", got, addr)
	}
	c, err = admin.Dial(context.Background(), addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	a, err = c.Lease(time.Second, 7, 5, 4, addr, []string{addr})
	if err != nil || !a.Known || a.Held != 0 || a.Actives != 0 || !a.ActivesKnown || a.Incarnation == 0 || a.Incarnation == inc {
		t.Fatalf("admin Lease after the restart: %+v, %v (the first incarnation %#x)", a, err, inc)
	}
}

// terseConfig is a config of servers with every vbucket active on the
// first one.
func terseConfig(t *testing.T, servers []string, rev int64) []byte {
	t.Helper()
	vm := make([][]int, testVBuckets)
	for i := range vm {
		vm[i] = []int{0}
	}
	cfg := vbmap.Config{Rev: rev, NodeLocator: "vbucket", VBucketServerMap: vbmap.VBucketServerMap{HashAlgorithm: "CRC", ServerList: servers, VBucketMap: vm}}
	data, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestLeaseTakesNewerView: a node without a lease that is given a newer
// map turns dead every active vbucket the map gives to another node and
// answers NOT_MY_VBUCKET; one that holds a lease keeps its states (the
// manager, in contact, sets them) until its lease ends.
func TestLeaseTakesNewerView(t *testing.T) {
	_, addr := startCluster(t, nil)
	b := dialBin(t, addr)
	other := "127.0.0.1:1"
	for _, vb := range []uint16{1, 2} {
		b.setState(vb, vbucket.Active)
	}
	const L = 300 * time.Millisecond
	b.grant(L, 1, 1, 0, addr, addr, other)
	b.grant(L, 1, 2, 1, addr, addr, other)
	// Leased: a map naming the other node changes nothing.
	if h, _ := b.do(protocol.OpSetClusterConfig, 0, revExtras(0, 2), []byte("default"), terseConfig(t, []string{other, addr}, 2)); h.Status != protocol.StatusOK {
		t.Fatalf("SET_CLUSTER_CONFIG: %#x", h.Status)
	}
	if st := b.getStatus(1, keyFor(t, 1)); st != protocol.StatusKeyNotFound {
		t.Fatalf("leased, after a map naming another node: status %#x, want served", st)
	}
	// The lease runs out (no peer answers: 127.0.0.1:1 refuses): the node
	// takes the stored map's view then (lease.go, askPeers), and the
	// vbuckets it gives away answer NOT_MY_VBUCKET; a newer map kills
	// the actives it gives away too.
	b.waitStatus(1, keyFor(t, 1), protocol.StatusNotMyVBucket, 5*time.Second)
	if h, _ := b.do(protocol.OpSetClusterConfig, 0, revExtras(0, 3), []byte("default"), terseConfig(t, []string{other, addr}, 3)); h.Status != protocol.StatusOK {
		t.Fatalf("SET_CLUSTER_CONFIG: %#x", h.Status)
	}
	for _, vb := range []uint16{1, 2} {
		h, body := b.do(protocol.OpGetVBucket, vb, nil, nil, nil)
		if h.Status != protocol.StatusOK || binary.BigEndian.Uint32(body[h.ExtLen:]) != uint32(vbucket.Dead) {
			t.Fatalf("vbucket %d after the newer map: %#x %q", vb, h.Status, body)
		}
		if st := b.getStatus(vb, keyFor(t, int(vb))); st != protocol.StatusNotMyVBucket {
			t.Fatalf("vbucket %d after the newer map: status %#x, want NOT_MY_VBUCKET", vb, st)
		}
	}
}

// TestLeaseFromPeers: three nodes granted a lease naming all three, then
// no more grants (every manager down): they ask each other, none holds a
// manager's lease, and they keep serving on each other's word; a node
// whose peers hold a manager's lease (it alone is cut off) gets none and
// stops.
func TestLeaseFromPeers(t *testing.T) {
	var addrs []string
	var cs []*binClient
	for range 3 {
		_, a := startCluster(t, nil)
		addrs = append(addrs, a)
		c := dialBin(t, a)
		c.setState(5, vbucket.Active)
		cs = append(cs, c)
	}
	const L = 400 * time.Millisecond
	grantAll := func(epoch, seq uint64, which ...int) {
		for _, i := range which {
			cs[i].grant(L, epoch, seq, seq-1, addrs[i], addrs...)
		}
	}
	grantAll(1, 1, 0, 1, 2)
	grantAll(1, 2, 0, 1, 2)
	key := keyFor(t, 5)
	// Three leases later, every node still serves, on its peers' word.
	for deadline := time.Now().Add(3 * L); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		for i, c := range cs {
			if st := c.getStatus(5, key); st != protocol.StatusKeyNotFound {
				t.Fatalf("node %d with no manager: status %#x, want served", i, st)
			}
		}
	}
	for i, c := range cs {
		if s := c.leaseStats(); s["lease_from_peers"] != "1" {
			t.Fatalf("node %d: %v", i, s)
		}
	}
	// Now nodes 1 and 2 hear a manager again (grants every L/4) and node 0
	// does not: its peers vouch for the manager, so node 0 must stop.
	var gcs []*admin.Conn // the manager's connections to nodes 1 and 2
	for _, a := range addrs[1:] {
		c, err := admin.Dial(context.Background(), a)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		gcs = append(gcs, c)
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { // owned by the test: stop ends it
		defer close(done)
		for seq := uint64(1); ; seq++ {
			for i, c := range gcs {
				if _, err := c.Lease(L, 2, seq, seq-1, addrs[i+1], addrs); err != nil {
					t.Errorf("LEASE to %s: %v", addrs[i+1], err)
					return
				}
			}
			select {
			case <-stop:
				return
			case <-time.After(L / 4):
			}
		}
	}()
	defer func() { close(stop); <-done }()
	cs[0].waitStatus(5, key, protocol.StatusTmpFail, 5*time.Second)
	for i := 1; i < 3; i++ {
		if st := cs[i].getStatus(5, key); st != protocol.StatusKeyNotFound {
			t.Fatalf("node %d, in the manager's contact: status %#x, want served", i, st)
		}
	}
}

// TestLeaseFetchesMapClientsName: a client's GET_CLUSTER_CONFIG naming a
// newer revision than the node's makes the node fetch that map from a
// peer (here while it holds a lease, so it only stores it).
func TestLeaseFetchesMapClientsName(t *testing.T) {
	_, a := startCluster(t, nil)
	_, b := startCluster(t, nil)
	ca, cb := dialBin(t, a), dialBin(t, b)
	ca.setState(4, vbucket.Active)
	const L = 2 * time.Second
	ca.grant(L, 1, 1, 0, a, a, b)
	ca.grant(L, 1, 2, 1, a, a, b)
	if h, _ := ca.do(protocol.OpSetClusterConfig, 0, revExtras(0, 3), []byte("default"), terseConfig(t, []string{a, b}, 3)); h.Status != protocol.StatusOK {
		t.Fatalf("SET_CLUSTER_CONFIG on a: %#x", h.Status)
	}
	if h, _ := cb.do(protocol.OpSetClusterConfig, 0, revExtras(0, 9), []byte("default"), terseConfig(t, []string{b, a}, 9)); h.Status != protocol.StatusOK {
		t.Fatalf("SET_CLUSTER_CONFIG on b: %#x", h.Status)
	}
	// The client has seen rev 9; a answers with its rev 3 and fetches.
	if h, body := ca.do(protocol.OpGetClusterConfig, 0, revExtras(0, 9), nil, nil); h.Status != protocol.StatusOK || len(body) != int(h.ExtLen)+int(h.KeyLen) {
		t.Fatalf("GET_CLUSTER_CONFIG with newer extras: %#x %q", h.Status, body)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		h, body := ca.do(protocol.OpGetClusterConfig, 0, nil, nil, nil)
		if h.Status == protocol.StatusOK && strings.Contains(string(body), `"rev":9`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a still hands out %q 5 s after a client named rev 9", body)
		}
	}
	// Leased: its vbucket is still served.
	if st := ca.getStatus(4, keyFor(t, 4)); st != protocol.StatusKeyNotFound {
		t.Fatalf("leased node after fetching the newer map: status %#x, want served", st)
	}
}

// BenchmarkGetPipelinedLease is BenchmarkGetPipelined in cluster mode,
// without lease mode and with a lease held: what the lease check costs a
// pipeline of 16 gets (one clock read per batch).
func BenchmarkGetPipelinedLease(b *testing.B) {
	for _, leased := range []bool{false, true} {
		b.Run(map[bool]string{false: "no-lease", true: "leased"}[leased], func(b *testing.B) {
			s, err := New(Config{Port: -1, PortSet: true, Version: "t", VBuckets: testVBuckets, InsecureCluster: true})
			if err != nil {
				b.Fatal(err)
			}
			defer s.store.Close()
			s.cl.vbs.Set(vbmap.VBucketString("key:1", testVBuckets), vbucket.Active)
			if leased {
				s.cl.lease.on.Store(true)
				s.cl.lease.until.Store(1 << 62)
			}
			c := newTestConn(s, "set key:1 0 0 100\r\n"+strings.Repeat("v", 100)+"\r\n")
			c.processInput()
			in := []byte(strings.Repeat("get key:1\r\n", 16))
			c.out = make([]byte, 0, 64<<10)
			b.ReportAllocs()
			b.SetBytes(int64(len(in)))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				c.rbuf = in
				c.r, c.w = 0, len(in)
				c.out = c.out[:0]
				c.processInput()
			}
			if !strings.HasPrefix(string(c.out), "VALUE key:1") {
				b.Fatalf("replies: %.40q", c.out)
			}
		})
	}
}
