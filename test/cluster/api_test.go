package cluster

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vbcache/vbcache/internal/manager/mgrclient"
	"github.com/vbcache/vbcache/internal/vbmap"
	"github.com/vbcache/vbcache/memcache"
	"github.com/vbcache/vbcache/test/nodeproc"
)

// TestConfigStreamAndStop follows the manager's streaming config endpoint
// (Couchbase's /pools/default/bs/default: each config followed by four
// newlines) while nodes join and a rebalance runs and is stopped: every
// config it pushes is valid and newer than the one before, and the map
// left by the stop is complete (every vbucket has an active).
func TestConfigStreamAndStop(t *testing.T) {
	nodes := startNodes(t, 3)
	mp := startManager(t, "--replicas", "0", "--failover-after", "0", "--max-moves", "1")
	m := mgr{t: t, url: mp.URL()}
	m.waitLeader()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := (&mgrclient.Client{Base: m.url}).StreamConfigs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	configs := make(chan *vbmap.Config, 1024)
	go func() { // owned by the test: ends when ctx cancels the request
		defer close(configs)
		for {
			b, err := stream.Next()
			if err != nil {
				return
			}
			c, err := vbmap.Parse(b)
			if err != nil {
				t.Errorf("streamed config does not parse: %v", err)
				return
			}
			configs <- c
		}
	}()

	for _, n := range nodes[:2] {
		m.addNode(n.Addr)
	}
	m.rebalance(60 * time.Second) // populate two nodes
	m.addNode(nodes[2].Addr)
	m.startRebalance()
	// Stop once a few vbuckets have moved.
	deadline := time.Now().Add(30 * time.Second)
	for {
		s := m.status()
		if s.Rebalance != nil && s.Rebalance.Done >= 5 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the rebalance made no progress")
		}
		time.Sleep(5 * time.Millisecond)
	}
	m.stopRebalance()
	r := m.waitRebalance(60 * time.Second)
	if r.Done >= r.Total {
		t.Logf("the rebalance finished before the stop took effect (%d of %d)", r.Done, r.Total)
	} else {
		t.Logf("stopped after %d of %d vbuckets", r.Done, r.Total)
	}
	// The last streamed config must be the manager's current one.
	want := m.status().Rev
	var last *vbmap.Config
	var n int
	timeout := time.After(10 * time.Second)
	for last == nil || last.Rev < want {
		select {
		case c, ok := <-configs:
			if !ok {
				t.Fatal("stream ended")
			}
			if last != nil && !c.Newer(last) {
				t.Errorf("streamed rev %d after rev %d", c.Rev, last.Rev)
			}
			last = c
			n++
		case <-timeout:
			t.Fatalf("stream never reached rev %d (last %v)", want, last)
		}
	}
	t.Logf("%d configs streamed, last rev %d", n, last.Rev)
	if err := last.Validate(); err != nil {
		t.Fatalf("final map invalid: %v", err)
	}
	for vb, row := range last.VBucketServerMap.VBucketMap {
		if row[0] < 0 {
			t.Fatalf("vbucket %d has no active after the stop", vb)
		}
	}
	// The map in the stream is the map the nodes serve.
	c := client(t, addrs(nodes))
	if err := c.Set(mcItem("after-stop", "1")); err != nil {
		t.Fatalf("set after the stop: %v", err)
	}
}

// TestManagerRefusesCrossOriginChanges: a browser's cross-origin request
// that would change the cluster (a form posted from another site, as
// issue 23 found with "Origin: evil.example") is refused with 403 by
// every state-changing endpoint and changes nothing; the same request
// from the manager's own origin, or from a program (no browser headers),
// is served, and reads are open to any origin.
func TestManagerRefusesCrossOriginChanges(t *testing.T) {
	nodes := startNodes(t, 1)
	mp := startManager(t, "--replicas", "0", "--failover-after", "0")
	m := mgr{t: t, url: mp.URL()}
	m.waitLeader()
	cr := nodeproc.ClusterCredentials()
	do := func(method, path string, header ...string) int {
		return httpDo(t, method, m.url+path, cr.User, cr.Password, header...)
	}
	changes := stateChanges(nodes[0].Addr)
	for _, c := range changes {
		for _, h := range [][]string{
			{"Sec-Fetch-Site", "cross-site"},
			{"Origin", "http://evil.example"},
		} {
			if code := do(c.method, c.path, h...); code != http.StatusForbidden {
				t.Errorf("%s %s with %s: %s: %d, want 403", c.method, c.path, h[0], h[1], code)
			}
		}
	}
	if s := m.status(); len(s.Nodes) != 0 {
		t.Fatalf("refused requests changed the cluster: %+v", s.Nodes)
	}
	if code := httpDo(t, "GET", m.url+"/status", "", "", "Sec-Fetch-Site", "cross-site"); code != http.StatusOK {
		t.Errorf("cross-origin GET /status: %d, want 200", code)
	}
	// The manager's own page posting to it, then a program: both served.
	q := "?node=" + url.QueryEscape(nodes[0].Addr)
	if code := do("POST", "/nodes"+q, "Origin", m.url, "Sec-Fetch-Site", "same-origin"); code != http.StatusOK {
		t.Fatalf("same-origin POST /nodes: %d, want 200", code)
	}
	if s := m.status(); len(s.Nodes) != 1 || !s.Nodes[0].Member {
		t.Fatalf("after the same-origin add: %+v, want the node a member", s.Nodes)
	}
	if code := do("DELETE", "/nodes"+q); code != http.StatusOK {
		t.Fatalf("DELETE /nodes from a program: %d, want 200", code)
	}
	for _, n := range m.status().Nodes {
		if n.Member {
			t.Errorf("after the removal from a program: %+v is still a member", n)
		}
	}
}

// stateChanges is every endpoint of the manager's API that changes the
// cluster (internal/manager/http.go's POSTs and DELETE), naming node.
func stateChanges(node string) []struct{ method, path string } {
	q := "?node=" + url.QueryEscape(node)
	return []struct{ method, path string }{
		{"POST", "/nodes" + q}, {"DELETE", "/nodes" + q}, {"POST", "/rebalance"},
		{"POST", "/rebalance/stop"}, {"POST", "/failover" + q},
	}
}

// httpDo sends a request (with HTTP Basic credentials when user is set,
// and header's name, value pairs) and returns its status code.
func httpDo(t *testing.T, method, u, user, password string, header ...string) int {
	t.Helper()
	req, err := http.NewRequest(method, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	if user != "" {
		req.SetBasicAuth(user, password)
	}
	for i := 0; i < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// TestManagerChangesNeedAdmin: managers run with --cluster-auth answer
// 401 to every request that would change the cluster unless it carries
// the administrator's login (none, a wrong password, another user's name:
// all refused, and nothing changes), the leader and a follower alike (a
// follower checks before it proxies a change to the leader); the reads
// SDKs and proxies use stay open. With the login, a change sent to the
// follower is served.
func TestManagerChangesNeedAdmin(t *testing.T) {
	nodes := startNodes(t, 1)
	procs := startManagerCluster(t, 2, "--replicas", "0", "--failover-after", "0")
	ms := []mgr{{t: t, url: procs[0].URL()}, {t: t, url: procs[1].URL()}}
	leader := waitLeading(t, ms, 30*time.Second)
	follower := ms[1-leader]
	cr := nodeproc.ClusterCredentials()
	for _, m := range ms {
		for _, c := range stateChanges(nodes[0].Addr) {
			for _, login := range [][2]string{{"", ""}, {cr.User, "wrong"}, {"reader", cr.Password}} {
				if code := httpDo(t, c.method, m.url+c.path, login[0], login[1]); code != http.StatusUnauthorized {
					t.Errorf("%s %s%s as %q: %d, want 401", c.method, m.url, c.path, login[0], code)
				}
			}
		}
		for _, path := range []string{"/status", "/map"} {
			if code := httpDo(t, "GET", m.url+path, "", ""); code != http.StatusOK {
				t.Errorf("GET %s%s without a login: %d, want 200", m.url, path, code)
			}
		}
	}
	if s := ms[leader].status(); len(s.Nodes) != 0 {
		t.Fatalf("refused requests changed the cluster: %+v", s.Nodes)
	}
	// The Go client without the login gets the manager's explanation.
	if err := (&mgrclient.Client{Base: follower.url}).AddNode(context.Background(), nodes[0].Addr); err == nil || !strings.Contains(err.Error(), "administrator's login") {
		t.Fatalf("AddNode without a login: %v, want the manager's 401", err)
	}
	follower.addNode(nodes[0].Addr)
	if s := ms[leader].status(); len(s.Nodes) != 1 || !s.Nodes[0].Member {
		t.Fatalf("after the add through the follower with the login: %+v", s.Nodes)
	}
}

// TestManagerReadOnlyLogins: a manager run with --api-readers answers
// every read (the map SDKs and proxies bootstrap from, its stream, status,
// map) only with a login: 401 without one or with a wrong password, 200
// for a reader and for the administrator; a reader's change is refused
// with 403 by every state-changing endpoint and changes nothing. A proxy
// with --manager-auth FILE (a reader) bootstraps from it and serves.
// SIGHUP reloads the readers' file.
func TestManagerReadOnlyLogins(t *testing.T) {
	readers := filepath.Join(t.TempDir(), "readers.pwdb")
	if err := os.WriteFile(readers, []byte("sdk:sdk-secret\nproxy:proxy-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	nodes := startNodes(t, 1)
	mp := startManager(t, "--replicas", "0", "--failover-after", "0", "--api-readers", readers)
	m := mgr{t: t, url: mp.URL()}
	m.waitLeader() // the harness's client logs in as the administrator
	m.addNode(nodes[0].Addr)
	m.rebalance(60 * time.Second)
	cr := nodeproc.ClusterCredentials()
	reads := []string{"/pools/default/b/default", "/status", "/map"}
	for _, path := range reads {
		for _, login := range [][2]string{{"", ""}, {"sdk", "wrong"}, {cr.User, "wrong"}} {
			if code := httpDo(t, "GET", m.url+path, login[0], login[1]); code != http.StatusUnauthorized {
				t.Errorf("GET %s as %q/%q: %d, want 401", path, login[0], login[1], code)
			}
		}
		for _, login := range [][2]string{{"sdk", "sdk-secret"}, {"proxy", "proxy-secret"}, {cr.User, cr.Password}} {
			if code := httpDo(t, "GET", m.url+path, login[0], login[1]); code != http.StatusOK {
				t.Errorf("GET %s as %q: %d, want 200", path, login[0], code)
			}
		}
	}
	rev := m.status().Rev
	for _, c := range stateChanges(nodes[0].Addr) {
		if code := httpDo(t, c.method, m.url+c.path, "sdk", "sdk-secret"); code != http.StatusForbidden {
			t.Errorf("%s %s as a reader: %d, want 403", c.method, c.path, code)
		}
	}
	if s := m.status(); s.Rev != rev || len(s.Nodes) != 1 || !s.Nodes[0].Member {
		t.Fatalf("a reader's refused changes changed the cluster: rev %d→%d, %+v", rev, s.Rev, s.Nodes)
	}
	// The stream too.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := (&mgrclient.Client{Base: m.url}).StreamConfigs(ctx); err == nil {
		t.Error("the config stream answered without a login")
	}
	s, err := (&mgrclient.Client{Base: m.url, User: "proxy", Password: "proxy-secret"}).StreamConfigs(ctx)
	if err != nil {
		t.Fatalf("the config stream as a reader: %v", err)
	}
	if _, err := s.Next(); err != nil {
		t.Errorf("the config stream as a reader: %v", err)
	}
	s.Close()

	login := filepath.Join(t.TempDir(), "proxy.pwdb")
	if err := os.WriteFile(login, []byte("proxy:proxy-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	px := startProxyProc(t, "--manager", m.url, "--manager-auth", login)
	c := memcache.New(px.addr)
	c.Timeout = 5 * time.Second
	if err := c.Set(mcItem("through-a-reader", "v")); err != nil {
		t.Fatalf("set through a proxy logged in as a reader: %v", err)
	}
	if it, err := c.Get("through-a-reader"); err != nil || string(it.Value) != "v" {
		t.Fatalf("get through a proxy logged in as a reader: %v %v", it, err)
	}

	// SIGHUP reloads the readers: a changed password takes effect at
	// the next request, a removed reader is refused.
	if err := os.WriteFile(readers+".next", []byte("sdk:sdk-rotated\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(readers+".next", readers); err != nil {
		t.Fatal(err)
	}
	p := mp.(interface {
		Signal(os.Signal) error
		Stderr() string
	})
	if err := p.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the manager's reload", func() bool { return strings.Contains(p.Stderr(), "SIGHUP: logins reloaded") })
	for _, l := range []struct {
		user, password string
		want           int
	}{{"sdk", "sdk-secret", http.StatusUnauthorized}, {"proxy", "proxy-secret", http.StatusUnauthorized}, {"sdk", "sdk-rotated", http.StatusOK}, {cr.User, cr.Password, http.StatusOK}} {
		if code := httpDo(t, "GET", m.url+"/status", l.user, l.password); code != l.want {
			t.Errorf("after the reload, GET /status as %q/%q: %d, want %d", l.user, l.password, code, l.want)
		}
	}
}
