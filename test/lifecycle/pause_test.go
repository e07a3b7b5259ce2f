package lifecycle

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vbcache/vbcache/internal/admin"
	"github.com/vbcache/vbcache/internal/manager"
	"github.com/vbcache/vbcache/internal/manager/mgrclient"
	"github.com/vbcache/vbcache/internal/vbmap"
	"github.com/vbcache/vbcache/internal/vbucket"
)

// TestLocalPausedNodeServesNothing is issue 20's scenario, as an operator
// meets it: `vbcache local --nodes 3 --replicas 1 --failover-after 3s`, 200
// keys written to vbuckets one node owns, that node paused (SIGSTOP: a long
// GC pause, a hung VM, a partition) until the manager has failed it over,
// then resumed (SIGCONT). A client with the old map then sends SET and GET
// for those keys to it, on a connection opened before the pause and on
// new ones: not one of them may be served (before the fence, 200 of 200
// writes were acknowledged and lost, 10 s later still). The node answers a
// temporary failure until it knows it is out, then NOT_MY_VBUCKET; the
// time to the first NOT_MY_VBUCKET is logged. Then every vbucket has
// exactly one active node.
func TestLocalPausedNodeServesNothing(t *testing.T) {
	for _, mode := range []struct {
		name  string
		flags []string
	}{{"async", nil}, {"sync-replication", []string{"--sync-replication"}}} {
		t.Run(mode.name, func(t *testing.T) { pausedNodeServesNothing(t, mode.flags) })
	}
}

func pausedNodeServesNothing(t *testing.T, flags []string) {
	const (
		nodes    = 3
		vbuckets = 64
		keys     = 200
	)
	l := startLocal(t, nodes, append([]string{"--replicas", "1", "--vbuckets", strconv.Itoa(vbuckets), "-m", "16", "--failover-after", "3s"}, flags...)...)
	victim := l.addr(0)
	cfg := managerConfig(t, l.base+1)
	me := slices.Index(cfg.VBucketServerMap.ServerList, victim)
	// 200 keys in the victim's active vbuckets.
	var ks []string
	for i := 0; me >= 0 && len(ks) < keys && i < 1_000_000; i++ {
		k := fmt.Sprintf("key%04d", i)
		if row := cfg.VBucketServerMap.VBucketMap[vbmap.VBucketString(k, vbuckets)]; row[0] == me {
			ks = append(ks, k)
		}
	}
	if len(ks) < keys {
		t.Fatalf("found %d keys in %s's vbuckets (map index %d)", len(ks), victim, me)
	}
	before := dialText(t, victim)
	for _, k := range ks {
		if r := before.do(t, "set "+k+" 0 0 3\r\nval\r\n"); r != "STORED" {
			t.Fatalf("set %s before the pause: %q", k, r)
		}
	}
	// The pause comes once the victim holds a lease on its final quorum
	// set (the manager's status shows what its grants gave each node):
	// one that never answered a grant naming all three nodes cannot be
	// failed over without --force.
	l.wait("the victim's lease on the whole cluster", 30*time.Second, func() bool {
		ls := leaseOf(t, l.base+1, victim)
		return ls != nil && ls.Answered >= 2 && len(ls.Quorums) == 1 && len(ls.Quorums[0]) == nodes
	})

	pid := l.nodePid(0)
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	paused := time.Now()
	resumed := false
	defer func() {
		if !resumed {
			syscall.Kill(pid, syscall.SIGCONT)
		}
	}()
	done := "manager: failed over " + victim
	l.wait("the manager to fail "+victim+" over", 60*time.Second, func() bool { return strings.Contains(l.stderr.String(), done) })
	t.Logf("%s failed over %v into its pause", victim, time.Since(paused).Round(time.Millisecond))
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	resumed = true
	resumedAt := time.Now()

	// For 10 s after the resume (and at most 100 rounds), every key is
	// written and read on the connection of before the pause and on a new
	// one; nothing may be served.
	var served, tmpfail, nmvb int
	var firstNMVB time.Duration
	var sample []string
	for round := 0; round < 100 && (round < 2 || time.Since(resumedAt) < 10*time.Second); round++ {
		conns := []*textConn{before, dialText(t, victim)}
		for ci, c := range conns {
			for i, k := range ks {
				for _, req := range []string{fmt.Sprintf("set %s 0 0 10\r\nSPLIT-%04d\r\n", k, i), "get " + k + "\r\n"} {
					r := c.do(t, req)
					switch r {
					case "SERVER_ERROR not my vbucket":
						nmvb++
						if firstNMVB == 0 {
							firstNMVB = time.Since(resumedAt)
						}
					case "SERVER_ERROR temporary failure":
						tmpfail++
					default: // STORED, VALUE …, END: served
						served++
						if len(sample) < 5 {
							sample = append(sample, fmt.Sprintf("round %d conn %d %q → %q", round, ci, strings.TrimSpace(req), r))
						}
					}
				}
			}
		}
		conns[1].close()
	}
	t.Logf("after the resume: %d requests served, %d temporary failures, %d NOT_MY_VBUCKET; the first NOT_MY_VBUCKET %v after the resume",
		served, tmpfail, nmvb, firstNMVB.Round(time.Millisecond))
	if served > 0 {
		t.Errorf("the failed-over node served %d requests after it resumed, e.g. %v\nstderr:\n%s", served, sample, l.stderr.String())
	}
	if nmvb == 0 {
		t.Errorf("the failed-over node never answered NOT_MY_VBUCKET in 10 s")
	}

	// Never two actives: each vbucket is active on exactly one node.
	active := make([]int, vbuckets)
	for i := range nodes {
		c, err := admin.DialWith(context.Background(), l.addr(i), l.creds())
		if err != nil {
			t.Fatal(err)
		}
		for vb := range vbuckets {
			if st, err := c.GetVBucket(vb); err == nil && st == vbucket.Active {
				active[vb]++
			}
		}
		c.Close()
	}
	for vb, n := range active {
		if n != 1 {
			t.Errorf("vbucket %d is active on %d nodes", vb, n)
		}
	}
	l.stop()
}

// managerAt is a client of the manager on port; each request may take
// 10 s.
func managerAt(port int) *mgrclient.Client {
	return &mgrclient.Client{Base: fmt.Sprintf("http://127.0.0.1:%d", port), HTTP: &http.Client{Timeout: 10 * time.Second}}
}

// leaseOf returns the manager's view of node's lease, from its status.
func leaseOf(t *testing.T, port int, node string) *manager.LeaseStatus {
	t.Helper()
	st, err := managerAt(port).Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range st.Nodes {
		if n.Addr == node {
			return n.Lease
		}
	}
	return nil
}

// managerConfig fetches the cluster config from the manager on port.
func managerConfig(t *testing.T, port int) *vbmap.Config {
	t.Helper()
	b, err := managerAt(port).Config(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := vbmap.Parse(b)
	if err != nil {
		t.Fatalf("the manager's config: %v\n%s", err, b)
	}
	return cfg
}

// textConn is a text-protocol connection that reads one reply per request
// (a get's VALUE line is read with its data and END).
type textConn struct {
	nc net.Conn
	br *bufio.Reader
}

func dialText(t *testing.T, addr string) *textConn {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return &textConn{nc: nc, br: bufio.NewReader(nc)}
}

func (c *textConn) close() { c.nc.Close() }

// do sends req and returns the reply's first line; for "VALUE" it reads
// the data and END too.
func (c *textConn) do(t *testing.T, req string) string {
	t.Helper()
	c.nc.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c.nc, req); err != nil {
		t.Fatal(err)
	}
	line, err := c.br.ReadString('\n')
	if err != nil {
		t.Fatalf("%q: %v", req, err)
	}
	line = strings.TrimSuffix(line, "\r\n")
	if strings.HasPrefix(line, "VALUE ") {
		f := strings.Fields(line)
		n, _ := strconv.Atoi(f[len(f)-1])
		if _, err := io.ReadFull(c.br, make([]byte, n+2)); err != nil {
			t.Fatal(err)
		}
		if end, err := c.br.ReadString('\n'); err != nil || end != "END\r\n" {
			t.Fatalf("%q: after the value %q %v", req, end, err)
		}
	}
	return line
}
