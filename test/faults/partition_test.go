// Package faults runs vbcache clusters on test hosts of their own
// (test/netlab: network namespaces joined by a bridge) and injects real
// faults: partitions (nftables), pauses (SIGSTOP), kills (SIGKILL) and
// restarts of real node, manager and etcd processes. Clients record every
// operation and porcupine checks the history (test/history): issue 21's
// fault harness.
//
//   - TestPartitionNodeFromManager, TestPartitionHistoryLinearizable and
//     TestPauseHistoryLinearizable: one fault each, on one manager and
//     three nodes.
//   - TestSchedule and TestScheduleAsync (schedule_test.go): a seeded
//     random schedule of every fault, on three managers and four nodes,
//     under load through the vbucket client and the proxy. -seed N
//     replays one exactly (the order of the faults, their victims and the
//     load's keys and values; the processes' timing is the machine's),
//     -faults N runs each fault N times, -only F,G picks faults, -long
//     runs the long schedules.
//   - TestCheckerCatchesUnfencedNode (broken_test.go): a build without
//     fencing (-tags vbcache_nofence) must produce violations, or the
//     checks above could not fail.
//
// A failing history's HTML goes to $VBCACHE_ARTIFACTS (test/run.sh sets
// test-artifacts/) or the temporary directory. Without root, ip or nft
// the tests skip (in CI they fail).
package faults

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/vbcache/vbcache/internal/admin"
	"github.com/vbcache/vbcache/internal/manager"
	"github.com/vbcache/vbcache/internal/protocol"
	"github.com/vbcache/vbcache/internal/vbmap"
	"github.com/vbcache/vbcache/internal/vbucket"
	"github.com/vbcache/vbcache/test/netlab"
	"github.com/vbcache/vbcache/test/nodeproc"
)

var vbcacheBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "vbcache-faults-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	vbcacheBin, err = nodeproc.BuildVbcache(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

const vbuckets = 64

// cluster is a manager and three nodes, each on its own lab host, and a
// client host the test works from.
type cluster struct {
	t       *testing.T
	lab     *netlab.Lab
	mgr     *netlab.Host
	nodes   []*netlab.Host
	client  *netlab.Host
	http    *http.Client
	mgrProc *netlab.Proc
	procs   []*netlab.Proc // the nodes', in the order of nodes
}

func startCluster(t *testing.T, mgrFlags ...string) *cluster {
	return startClusterNodes(t, nil, mgrFlags...)
}

// startClusterNodes is startCluster with extra flags for the nodes.
func startClusterNodes(t *testing.T, nodeFlags []string, mgrFlags ...string) *cluster {
	lab := netlab.New(t)
	c := &cluster{t: t, lab: lab, mgr: lab.Host("manager"), client: lab.Host("client")}
	c.http = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DialContext: c.client.DialContext}}
	auth := nodeproc.ClusterAuthFile(t) // every link logs in as the admin
	for i := range 3 {
		h := lab.Host(fmt.Sprintf("node%d", i+1))
		p := h.Start(t, vbcacheBin, append([]string{"server", "-l", h.IP, "-p", "11211", "--vbuckets", fmt.Sprint(vbuckets), "-m", "64",
			"--cluster-auth", auth}, nodeFlags...)...)
		p.WaitListening(t, c.client, h.Addr(11211), 10*time.Second)
		c.nodes = append(c.nodes, h)
		c.procs = append(c.procs, p)
	}
	m := c.mgr
	mp := m.Start(t, vbcacheBin, append([]string{"manager", "--listen", m.Addr(11212), "--data-dir", t.TempDir() + "/etcd",
		"--etcd-client-url", "http://" + m.Addr(2379), "--etcd-peer-url", "http://" + m.Addr(2380),
		"--vbuckets", fmt.Sprint(vbuckets), "--replicas", "1", "--cluster-auth", auth}, mgrFlags...)...)
	mp.WaitListening(t, c.client, m.Addr(11212), 60*time.Second)
	c.mgrProc = mp
	for deadline := time.Now().Add(30 * time.Second); !c.status().Leading; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the manager does not lead:\n%s", mp.Output())
		}
	}
	for _, n := range c.nodes {
		c.call("POST", "/nodes", url.Values{"node": {n.Addr(11211)}})
	}
	c.call("POST", "/rebalance", nil)
	c.waitFor("the rebalance", 60*time.Second, func() bool {
		st := c.status()
		return st.Rebalance != nil && !st.Rebalance.Running
	})
	return c
}

func (c *cluster) call(method, path string, q url.Values) []byte {
	c.t.Helper()
	u := "http://" + c.mgr.Addr(11212) + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequest(method, u, nil)
	if err != nil {
		c.t.Fatal(err)
	}
	cr := nodeproc.ClusterCredentials()
	req.SetBasicAuth(cr.User, cr.Password)
	resp, err := c.http.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		c.t.Fatalf("%s %s: %s: %s", method, path, resp.Status, b)
	}
	return b
}

func (c *cluster) status() manager.Status {
	c.t.Helper()
	var st manager.Status
	if err := json.Unmarshal(c.call("GET", "/status", nil), &st); err != nil {
		c.t.Fatal(err)
	}
	return st
}

func (c *cluster) config() *vbmap.Config {
	c.t.Helper()
	cfg, err := vbmap.Parse(c.call("GET", "/pools/default/b/default", nil))
	if err != nil {
		c.t.Fatal(err)
	}
	return cfg
}

func (c *cluster) waitFor(what string, d time.Duration, cond func() bool) {
	c.t.Helper()
	waitFor(c.t, what, d, cond, nil)
}

// waitFor polls cond until it holds, for at most d; then it calls
// onTimeout (if set, to log what it can) and fails t.
func waitFor(t *testing.T, what string, d time.Duration, cond func() bool, onTimeout func()) {
	t.Helper()
	for deadline := time.Now().Add(d); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			if onTimeout != nil {
				onTimeout()
			}
			t.Fatalf("waited %v for %s", d, what)
		}
	}
}

// login logs a control connection in as the test binary's admin.
func login(nc net.Conn) error {
	cr := nodeproc.ClusterCredentials()
	return admin.Login(nc, cr.User, cr.Password)
}

// dial opens a control connection from the client host.
func (c *cluster) dial(addr string) *admin.Conn {
	c.t.Helper()
	nc, err := c.client.Dial("tcp", addr, 5*time.Second)
	if err != nil {
		c.t.Fatal(err)
	}
	if err := login(nc); err != nil {
		c.t.Fatalf("%s: %v", addr, err)
	}
	ac := admin.NewConn(nc, addr)
	ac.Timeout = 2 * time.Second
	c.t.Cleanup(func() { ac.Close() })
	return ac
}

// TestPartitionNodeFromManager cuts the packets from the manager's host to
// one node's (an asymmetric partition: the node still reaches the manager
// and every other host reaches it) and watches one of its vbuckets from a
// client with the old map: the node must stop serving it before the
// manager's failover makes the replica active, and never serve it after;
// once the partition heals the node answers NOT_MY_VBUCKET, and every
// vbucket has exactly one active.
func TestPartitionNodeFromManager(t *testing.T) {
	c := startCluster(t, "--failover-after", "2s", "--lease", "4s")
	victim := c.nodes[0]
	va := victim.Addr(11211)
	// A steady cluster: the victim holds a lease on the whole cluster, and
	// the manager has vouched for every node for more than a lease (a
	// younger leadership waits a lease longer before it promotes:
	// fencing.go).
	var last []byte
	defer func() {
		if t.Failed() {
			t.Logf("the manager's status:\n%s", last)
		}
	}()
	c.waitFor("a steady cluster", 30*time.Second, func() bool {
		last = c.call("GET", "/status", nil)
		for _, n := range c.status().Nodes {
			if n.Lease == nil || len(n.Lease.Quorums) != 1 || len(n.Lease.Quorums[0]) != 3 {
				return false
			}
			if d, err := time.ParseDuration(n.Lease.Vouched); err != nil || d < 5*time.Second {
				return false
			}
		}
		return true
	})
	cfg := c.config()
	me := -1
	for i, s := range cfg.VBucketServerMap.ServerList {
		if s == va {
			me = i
		}
	}
	vb, replica := -1, ""
	for v, row := range cfg.VBucketServerMap.VBucketMap {
		if row[0] == me && len(row) > 1 && row[1] >= 0 {
			vb, replica = v, cfg.VBucketServerMap.ServerList[row[1]]
			break
		}
	}
	if vb < 0 {
		t.Fatalf("no vbucket active on %s with a replica", va)
	}
	key := ""
	for i := 0; key == ""; i++ {
		if k := fmt.Sprintf("k%d", i); vbmap.VBucketString(k, vbuckets) == vb {
			key = k
		}
	}
	cv, cr := c.dial(va), c.dial(replica)
	if _, err := cv.Do(protocol.OpSet, uint16(vb), make([]byte, 8), []byte(key), []byte("v")); err != nil {
		t.Fatal(err)
	}

	c.lab.Cut(c.mgr, victim)
	cutAt := time.Now()
	var fencedAt, promotedAt time.Time
	servedAfter := 0
	for i := 0; i < 20000 && time.Since(cutAt) < 60*time.Second; i++ {
		st, err := cr.GetVBucket(vb)
		if err != nil {
			t.Fatalf("GET_VBUCKET %d on %s: %v", vb, replica, err)
		}
		if st == vbucket.Active && promotedAt.IsZero() {
			promotedAt = time.Now()
		}
		_, err = cv.Do(protocol.OpGet, uint16(vb), nil, []byte(key), nil)
		switch {
		case err == nil || admin.IsStatus(err, protocol.StatusKeyNotFound):
			if !promotedAt.IsZero() {
				servedAfter++
			}
		case admin.IsStatus(err, protocol.StatusTmpFail), admin.IsStatus(err, protocol.StatusNotMyVBucket):
			if fencedAt.IsZero() {
				fencedAt = time.Now()
			}
		default:
			t.Fatalf("get %s on %s: %v", key, va, err)
		}
		if !promotedAt.IsZero() && time.Since(promotedAt) > time.Second {
			break
		}
		time.Sleep(5 * time.Millisecond) // pacing the observations
	}
	if promotedAt.IsZero() {
		t.Fatalf("the replica on %s was not promoted within 60 s of the cut", replica)
	}
	t.Logf("manager → %s cut at 0: it refused from %v, the replica on %s was active from %v",
		va, fencedAt.Sub(cutAt).Round(time.Millisecond), replica, promotedAt.Sub(cutAt).Round(time.Millisecond))
	if fencedAt.IsZero() || !fencedAt.Before(promotedAt) {
		t.Errorf("%s was not fenced before the promotion (fenced %v, promoted %v)", va, fencedAt, promotedAt)
	}
	if servedAfter > 0 {
		t.Errorf("%s served vbucket %d %d times after its replica was seen active", va, vb, servedAfter)
	}
	if t.Failed() {
		t.Logf("manager log:\n%s", c.mgrProc.Output())
	}

	c.lab.Heal(victim)
	c.waitFor("the healed node to answer NOT_MY_VBUCKET", 30*time.Second, func() bool {
		_, err := cv.Do(protocol.OpGet, uint16(vb), nil, []byte(key), nil)
		return admin.IsStatus(err, protocol.StatusNotMyVBucket)
	})
	active := make([]int, vbuckets)
	for _, n := range c.nodes {
		ac := c.dial(n.Addr(11211))
		for v := range vbuckets {
			if st, err := ac.GetVBucket(v); err == nil && st == vbucket.Active {
				active[v]++
			}
		}
	}
	for v, n := range active {
		if n != 1 {
			t.Errorf("vbucket %d is active on %d nodes", v, n)
		}
	}
}
