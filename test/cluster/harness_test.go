// Package cluster tests a whole vbcache cluster end to end: real node
// processes, a real manager process with its embedded etcd, and the
// vbucket client.
package cluster

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/vbcache/vbcache/internal/admin"
	"github.com/vbcache/vbcache/internal/manager"
	"github.com/vbcache/vbcache/internal/manager/mgrclient"
	"github.com/vbcache/vbcache/memcache"
	"github.com/vbcache/vbcache/test/nodeproc"
)

var vbcacheBin string

// tagsFlag builds the vbcache under test with build tags: a
// vbcache_unsafe_* tag shows that a test catches the hole it turns back
// on (go test ./test/cluster -run X -args -vbcache-tags=vbcache_unsafe_targetwait).
var tagsFlag = flag.String("vbcache-tags", "", "comma-separated build tags for the vbcache under test")

func TestMain(m *testing.M) {
	flag.Parse()
	dir, err := os.MkdirTemp("", "vbcache-cluster-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	var tags []string
	if *tagsFlag != "" {
		tags = strings.Split(*tagsFlag, ",")
	}
	vbcacheBin, err = nodeproc.BuildVbcacheTags(dir, tags...)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// etcdFlags returns manager flags for an embedded etcd in a new directory
// on free ports.
func etcdFlags(t *testing.T) []string {
	t.Helper()
	c, err := nodeproc.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	p, err := nodeproc.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return []string{"--data-dir", t.TempDir() + "/etcd",
		"--etcd-client-url", fmt.Sprintf("http://127.0.0.1:%d", c),
		"--etcd-peer-url", fmt.Sprintf("http://127.0.0.1:%d", p)}
}

// startNodes starts n cluster-mode nodes with 1024 vbuckets.
func startNodes(t *testing.T, n int, flags ...string) []*nodeproc.Node {
	t.Helper()
	var out []*nodeproc.Node
	for range n {
		out = append(out, nodeproc.Start(t, nodeproc.Vbcache, vbcacheBin, append([]string{"--vbuckets", "1024", "-m", "256"}, flags...)...))
	}
	return out
}

// mgr is a manager's HTTP API for a test. Its methods fail the test when
// a request fails, except api's and tryStatus.
type mgr struct {
	t   *testing.T
	url string
	// password, when set, replaces the harness's administrator password
	// (a test that rotates it).
	password string
}

// dialAdmin opens a control connection to a node of m's cluster, logged
// in as the administrator (with m.password when set).
func (m mgr) dialAdmin(addr string) (*admin.Conn, error) {
	if m.password == "" {
		return nodeproc.DialAdmin(context.Background(), addr)
	}
	cr := &admin.Credentials{User: nodeproc.ClusterCredentials().User, Password: m.password, TLS: nodeproc.NodeTLS(addr)}
	return admin.DialWith(context.Background(), addr, cr)
}

// api is a client of the manager; each request may take a minute.
func (m mgr) api() *mgrclient.Client {
	c := nodeproc.ManagerClient(m.url, 60*time.Second)
	if m.password != "" {
		c.Password = m.password
	}
	return c
}

// must fails the test when a request's error is not nil.
func (m mgr) must(err error) {
	m.t.Helper()
	if err != nil {
		m.t.Fatal(err)
	}
}

func (m mgr) tryStatus() (manager.Status, error) { return m.api().Status(context.Background()) }

func (m mgr) status() manager.Status {
	m.t.Helper()
	s, err := m.tryStatus()
	m.must(err)
	return s
}

func (m mgr) addNode(addr string) {
	m.t.Helper()
	m.must(m.api().AddNode(context.Background(), addr))
}

func (m mgr) removeNode(addr string) {
	m.t.Helper()
	m.must(m.api().RemoveNode(context.Background(), addr))
}

func (m mgr) startRebalance() {
	m.t.Helper()
	m.must(m.api().StartRebalance(context.Background()))
}

func (m mgr) stopRebalance() {
	m.t.Helper()
	m.must(m.api().StopRebalance(context.Background()))
}

// failover fails addr over, not forced.
func (m mgr) failover(addr string) {
	m.t.Helper()
	m.must(m.api().Failover(context.Background(), addr, false))
}

// waitLeader waits until the manager reports a leader.
func (m mgr) waitLeader() {
	m.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		// A manager that won the election leads once it has loaded the
		// state; until then it names itself but does not lead yet.
		if s, err := m.tryStatus(); err == nil && (s.Leading || (s.Leader != "" && s.Leader != s.This)) {
			return
		}
		if time.Now().After(deadline) {
			m.t.Fatal("no leader within 30s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// rebalance starts a rebalance and waits for its end.
func (m mgr) rebalance(limit time.Duration) *manager.Rebalance {
	m.t.Helper()
	m.startRebalance()
	return m.waitRebalance(limit)
}

func (m mgr) waitRebalance(limit time.Duration) *manager.Rebalance {
	m.t.Helper()
	deadline := time.Now().Add(limit)
	for {
		s, err := m.tryStatus()
		if err == nil && s.Rebalance != nil && !s.Rebalance.Running {
			if s.Rebalance.Err != "" {
				m.t.Fatalf("rebalance failed: %s", s.Rebalance.Err)
			}
			return s.Rebalance
		}
		if time.Now().After(deadline) {
			m.t.Fatalf("rebalance not done within %v (last status %+v, err %v)", limit, s.Rebalance, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// client returns a vbucket client bootstrapped from the nodes, patient
// enough to ride through moves.
func client(t *testing.T, seeds []string) *memcache.Client {
	t.Helper()
	c, err := memcache.NewCluster(context.Background(), seeds, &memcache.ClusterOptions{
		RefreshInterval: 200 * time.Millisecond, MaxTries: 30, MinBackoff: 2 * time.Millisecond,
		MaxBackoff: 50 * time.Millisecond, Timeout: 3 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func addrs(ns []*nodeproc.Node) []string {
	var out []string
	for _, n := range ns {
		out = append(out, n.Addr)
	}
	return out
}

func nodeprocStartManager(t *testing.T, flags ...string) *nodeproc.Node {
	t.Helper()
	n := nodeproc.StartManager(t, vbcacheBin, nil, flags...)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("manager %s log:\n%s", n.Addr, n.Stderr())
		}
	})
	return n
}

// waitFor polls cond every 5 ms until it holds, and fails the test
// naming what it waited for when it does not within timeout: a test waits
// for the state it needs (so many operations done, a replica caught up),
// not for a time.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", timeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func mcItem(k, v string) *memcache.Item { return &memcache.Item{Key: k, Value: []byte(v)} }
