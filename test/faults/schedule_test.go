package faults

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/vbcache/vbcache/internal/admin"
	"github.com/vbcache/vbcache/internal/manager"
	"github.com/vbcache/vbcache/internal/vbmap"
	"github.com/vbcache/vbcache/internal/vbucket"
	"github.com/vbcache/vbcache/memcache"
	"github.com/vbcache/vbcache/test/history"
	"github.com/vbcache/vbcache/test/netlab"
	"github.com/vbcache/vbcache/test/nodeproc"
)

var (
	seedFlag = flag.Uint64("seed", 0, "TestSchedule: the schedule's seed (0: from the clock; the test logs it)")
	longFlag = flag.Bool("long", false, "TestSchedule*: the long schedules (each fault 30 times)")
	perFault = flag.Int("faults", 0, "TestSchedule*: how many times each fault runs (0: 8, 2 with -short; the slowFaults half as often)")
	onlyFlag = flag.String("only", "", "TestSchedule: comma-separated faults to run (default all)")
	topoFlag = flag.String("topology", "", "TestSchedule*: the cluster as nodes,replicas,same|mixed (leases), e.g. 5,2,mixed (default: drawn from the seed)")
)

// The schedule's timing: probes, leases and failovers short enough that a
// fault and its recovery take seconds.
const (
	schedProbe    = 500 * time.Millisecond
	schedLease    = 2 * time.Second
	schedFailover = 1 * time.Second
)

// topology is the cluster a schedule runs on (issue 43 asks for 4-5
// nodes, --replicas 1 and 2, and managers with different --lease).
type topology struct {
	nodes    int             // the last one is the spare, which joins and leaves in rebalances
	replicas int             // the managers' --replicas
	leases   []time.Duration // each manager's --lease
}

// pickTopology draws a schedule's cluster from its seed (issue 43: the
// generator picks over 4-5 nodes, --replicas 1 and 2, and managers with
// the same or different --lease), so that every CI run tries another
// shape and -seed replays the shape with the faults. With mixed leases
// each manager has its own, so that a leadership change is also a change
// of lease terms (a failover waits by the longest lease any leader
// granted, recorded in etcd). -topology fixes the shape instead.
func pickTopology(t *testing.T, seed uint64) topology {
	if *topoFlag != "" {
		var tp topology
		var leases string
		if _, err := fmt.Sscanf(*topoFlag, "%d,%d,%s", &tp.nodes, &tp.replicas, &leases); err != nil || tp.nodes < 3 || tp.replicas < 1 || tp.replicas > 2 || (leases != "same" && leases != "mixed") {
			t.Fatalf("-topology %q: want nodes,replicas,same|mixed (nodes >= 3, replicas 1 or 2): %v", *topoFlag, err)
		}
		tp.leases = sameLeases
		if leases == "mixed" {
			tp.leases = mixedLeases
		}
		return tp
	}
	rng := rand.New(rand.NewPCG(seed, 1)) // a stream of its own: the faults' draws stay as they were
	tp := topology{nodes: 4 + rng.IntN(2), replicas: 1 + rng.IntN(2), leases: sameLeases}
	if rng.IntN(2) == 1 {
		tp.leases = slices.Clone(mixedLeases)
		rng.Shuffle(len(tp.leases), func(i, j int) { tp.leases[i], tp.leases[j] = tp.leases[j], tp.leases[i] })
	}
	return tp
}

// The managers' leases: every manager schedLease, or each its own.
var (
	sameLeases  = []time.Duration{schedLease, schedLease, schedLease}
	mixedLeases = []time.Duration{schedLease, 3 * time.Second, 2500 * time.Millisecond}
)

// recover bounds the time from a fault's heal (or, for a killed node, its
// failover) until every vbucket is served again: the failover's wait and
// the longest lease, and a second for a client to learn the new map from
// its first NOT_MY_VBUCKET or refused dial.
func (tp topology) recover() time.Duration {
	return schedFailover + slices.Max(tp.leases) + time.Second
}

func (tp topology) String() string {
	return fmt.Sprintf("%d nodes (one of them the spare), --replicas %d, managers' --lease %v (-topology %s)", tp.nodes, tp.replicas, tp.leases, tp.flag())
}

// flag is tp as -topology takes it.
func (tp topology) flag() string {
	leases := "same"
	if slices.Max(tp.leases) != slices.Min(tp.leases) {
		leases = "mixed"
	}
	return fmt.Sprintf("%d,%d,%s", tp.nodes, tp.replicas, leases)
}

// The faults of a schedule.
const (
	fCutFromManagers  = "cut-from-managers"  // the managers' packets to a node dropped (asymmetric), until its failover
	fIsolateNode      = "isolate-node"       // a node cut off from every host both ways, until its failover
	fPauseNode        = "pause-node"         // SIGSTOP until its failover, then SIGCONT
	fKillNode         = "kill-node"          // kill -9, failover, started again empty
	fRestartNode      = "restart-node"       // kill -9 and started again at once, before any failover
	fCutClientNode    = "cut-client-node"    // the client host and a node cut off from each other for 2 s
	fCutManagerEtcd   = "cut-manager-etcd"   // the leading manager (and its etcd member) cut off from the other etcd members, until another leads
	fKillLeaderMidReb = "kill-leader-mid-rb" // kill -9 of the leading manager while a rebalance moves vbuckets
	fKillNodeMidReb   = "kill-node-mid-rb"   // kill -9 of a node while a rebalance moves vbuckets, then as kill-node
	// The spare node joins, and is paused (SIGSTOP) while the rebalance
	// moves vbuckets into it, until its failover, then SIGCONT: a move's
	// target paused during its handover, with faults composed (issue 43):
	// the rebalance, the failover of a node that holds vbuckets it was
	// given and others still moving into it, and its return.
	fPauseTargetMidReb = "pause-target-mid-rb"
	// A node killed and, once the leader has begun its failover (its log
	// says so), started again empty at the same address: the failover
	// meets the new incarnation, which holds nothing and vouches for no
	// one (issue 43: a node restart during a failover).
	fRestartDuringFailover = "restart-in-failover"
	// The leading manager paused (SIGSTOP, its etcd member with it) while
	// a rebalance moves vbuckets, until another leads, then SIGCONT: it
	// runs again believing it leads until it finds its session gone, and
	// its requests meanwhile carry a term the nodes have seen superseded
	// (issue 43: a manager paused past its session).
	fPauseLeaderMidReb = "pause-leader-mid-rb"
	// Two faults overlapping (issue 43): a node paused (SIGSTOP) and, at
	// once, the leading manager (and its etcd member) cut off from the
	// other managers. The old leader, still granting leases to the nodes
	// until it finds its session gone, cannot commit; the new leader, of a
	// newer term, fails the paused node over by the longest lease any
	// leader granted. Then both heal.
	fPauseNodeCutLeader = "pause-node-cut-leader"
	// The spare node joins, and is cut off from every host both ways
	// while the rebalance moves vbuckets into it, until its failover:
	// pause-target-mid-rb's partition (issue 43: a pause or partition of
	// a move's target during its handover). Unlike a paused process, the
	// cut-off target runs on: it may finish a TAKEOVER whose answer never
	// arrives, and serves nobody.
	fCutTargetMidReb = "cut-target-mid-rb"
	// Two faults overlapping: a node and the leading manager killed (-9)
	// at once. A new leader must be elected, learn the node is down with
	// no probe history of its own, and fail it over by the longest lease
	// any leader granted; then both start again (the node empty).
	fKillNodeKillLeader = "kill-node-kill-leader"
	// A node killed (-9) while a rebalance moves vbuckets into or out of
	// it, and started again at once, empty, at the same address: the
	// moves meet a new incarnation (issue 43: a restarted move source
	// must not be set active empty while another copy holds the data),
	// and the restart is found by the actives it lacks.
	fRestartNodeMidReb = "restart-node-mid-rb"
)

// lossyFaults are the faults that fail a node over: with asynchronous
// replication, writes it acknowledged that its replicas did not have yet
// may be lost.
var lossyFaults = map[string]bool{fCutFromManagers: true, fIsolateNode: true, fPauseNode: true, fKillNode: true, fRestartNode: true,
	fKillNodeMidReb: true, fPauseTargetMidReb: true, fRestartDuringFailover: true, fPauseNodeCutLeader: true, fCutTargetMidReb: true, fKillNodeKillLeader: true, fRestartNodeMidReb: true}

// slowFaults run half as often as the others (rounded up): each waits
// for a new leader's election (a session's TTL, 5 s) and then for a
// failover or the rebalance, 20-25 s a run under -race, and CI's budget
// holds eight of each of the others.
var slowFaults = map[string]bool{fPauseLeaderMidReb: true, fPauseNodeCutLeader: true, fKillNodeKillLeader: true}

var allFaults = []string{fCutFromManagers, fIsolateNode, fPauseNode, fKillNode, fRestartNode, fCutClientNode, fCutManagerEtcd, fKillLeaderMidReb, fKillNodeMidReb,
	fPauseTargetMidReb, fCutTargetMidReb, fRestartNodeMidReb, fRestartDuringFailover, fPauseLeaderMidReb, fPauseNodeCutLeader, fKillNodeKillLeader}

// sched is the cluster a schedule runs on: three managers (each with an
// embedded etcd member of one three-member cluster), four or five nodes
// (all but the last members at the start; the last, the spare, joins and
// leaves in rebalances), a proxy, and the client host the load and the
// test's calls come from.
type sched struct {
	t      *testing.T
	lab    *netlab.Lab
	client *netlab.Host
	http   *http.Client

	mgrHosts []*netlab.Host
	mgrArgs  [][]string
	mgrs     []*netlab.Proc // by index of mgrHosts; replaced on restart

	nodeHosts []*netlab.Host
	nodeArgs  []string
	nodes     []*netlab.Proc // by index of nodeHosts; replaced on restart

	proxyHost *netlab.Host
	proxy     *netlab.Proc

	async bool     // the nodes replicate asynchronously
	topo  topology // the cluster's shape

	past []string // the logs of processes that were replaced, each headed by its name
}

func startSched(t *testing.T, async bool, topo topology) *sched {
	lab := netlab.New(t)
	s := &sched{t: t, lab: lab, client: lab.Host("client"), async: async, topo: topo}
	s.http = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: s.client.DialContext}}
	auth := nodeproc.ClusterAuthFile(t) // every link logs in as the admin
	s.nodeArgs = []string{"--vbuckets", fmt.Sprint(vbuckets), "-m", "64", "--cluster-auth", auth}
	if !async {
		s.nodeArgs = append(s.nodeArgs, "--sync-replication")
	}
	for i := range topo.nodes {
		h := lab.Host(fmt.Sprintf("node%d", i+1))
		s.nodeHosts = append(s.nodeHosts, h)
		s.nodes = append(s.nodes, nil)
		s.startNode(i)
	}
	var initial []string
	for i := range 3 {
		h := lab.Host(fmt.Sprintf("manager%d", i+1))
		s.mgrHosts = append(s.mgrHosts, h)
		initial = append(initial, fmt.Sprintf("m%d=http://%s", i+1, h.Addr(2380)))
	}
	for i, h := range s.mgrHosts {
		s.mgrArgs = append(s.mgrArgs, []string{"manager", "--listen", h.Addr(11212), "--data-dir", t.TempDir() + "/etcd",
			"--etcd-name", fmt.Sprintf("m%d", i+1), "--etcd-client-url", "http://" + h.Addr(2379), "--etcd-peer-url", "http://" + h.Addr(2380),
			"--etcd-initial-cluster", strings.Join(initial, ","), "--etcd-initial-cluster-token", "vbcache-faults",
			"--vbuckets", fmt.Sprint(vbuckets), "--replicas", fmt.Sprint(topo.replicas), "--max-moves", "2",
			"--probe-interval", schedProbe.String(), "--lease", topo.leases[i].String(), "--failover-after", schedFailover.String(),
			"--cluster-auth", auth})
		s.mgrs = append(s.mgrs, h.Start(t, vbcacheBin, s.mgrArgs[i]...))
	}
	for i, h := range s.mgrHosts {
		s.mgrs[i].WaitListening(t, s.client, h.Addr(11212), 60*time.Second)
	}
	s.waitFor("a leader", 60*time.Second, func() bool { return s.leader() >= 0 })
	for _, h := range s.nodeHosts[:s.spare()] {
		s.must("POST", "/nodes", url.Values{"node": {h.Addr(11211)}})
	}
	s.rebalance(60 * time.Second)
	s.proxyHost = lab.Host("proxy")
	var seeds []string
	for _, h := range s.nodeHosts {
		seeds = append(seeds, h.Addr(11211))
	}
	s.proxy = s.proxyHost.Start(t, vbcacheBin, "proxy", "--listen", s.proxyHost.Addr(22121), "--cluster", strings.Join(seeds, ","), "--timeout", "1000")
	s.proxy.WaitListening(t, s.client, s.proxyHost.Addr(22121), 10*time.Second)
	return s
}

// spare is the index of the node that is no member at the start: it
// joins and leaves in the faults' rebalances.
func (s *sched) spare() int { return len(s.nodeHosts) - 1 }

func (s *sched) startNode(i int) {
	if p := s.nodes[i]; p != nil {
		s.past = append(s.past, fmt.Sprintf("node%d, until %s:\n%s", i+1, time.Now().Format("15:04:05.000"), p.Output()))
	}
	h := s.nodeHosts[i]
	s.nodes[i] = h.Start(s.t, vbcacheBin, append([]string{"server", "-l", h.IP, "-p", "11211"}, s.nodeArgs...)...)
	s.nodes[i].WaitListening(s.t, s.client, h.Addr(11211), 10*time.Second)
}

func (s *sched) waitFor(what string, d time.Duration, cond func() bool) {
	s.t.Helper()
	waitFor(s.t, what, d, cond, s.dump)
}

// dumpAll writes every process's whole log to the artifacts directory.
func (s *sched) dumpAll() {
	for i, p := range s.mgrs {
		s.save(fmt.Sprintf("manager%d", i+1), p.Output())
	}
	for i, p := range s.nodes {
		s.save(fmt.Sprintf("node%d", i+1), p.Output())
	}
	s.save("proxy", s.proxy.Output())
	s.save("replaced-processes", strings.Join(s.past, "\n\n"))
}

// failoverLines logs what the managers said about failovers and
// promotions (their whole logs go to the artifacts, dumpAll): a vbucket
// left unserved after a fault is most often one whose promotion did not
// happen, and this is the part of the logs that says why.
func (s *sched) failoverLines() {
	for i, p := range s.mgrs {
		var lines []string
		for _, l := range strings.Split(p.Output(), "\n") {
			if strings.Contains(l, "failover") || strings.Contains(l, "failed over") || strings.Contains(l, "promot") || strings.Contains(l, "recovery") {
				lines = append(lines, l)
			}
		}
		s.t.Logf("manager%d on failovers and promotions (the last %d of %d lines):\n%s", i+1, min(len(lines), 40), len(lines),
			strings.Join(lines[max(0, len(lines)-40):], "\n"))
	}
}

func (s *sched) save(name, out string) {
	path := filepath.Join(artifactsDir(), fmt.Sprintf("vbcache-%s-%d.log", name, time.Now().UnixNano()))
	if err := os.WriteFile(path, []byte(out), 0o644); err == nil {
		s.t.Logf("%s's log: %s", name, path)
	}
}

// dump logs what the managers say and the end of every process's log.
func (s *sched) dump() {
	for i := range s.mgrHosts {
		b, err := s.call(i, "GET", "/status", nil)
		s.t.Logf("manager%d's status (%v):\n%s", i+1, err, b)
	}
	tail := func(name, out string) {
		lines := strings.Split(out, "\n")
		s.t.Logf("the end of %s's log:\n%s", name, strings.Join(lines[max(0, len(lines)-80):], "\n"))
	}
	for i, p := range s.mgrs {
		tail(fmt.Sprintf("manager%d", i+1), p.Output())
	}
	// The leader's goroutines (SIGQUIT makes a Go process print them and
	// exit), in full to a file: where a stuck step waits.
	if l := s.leader(); l >= 0 {
		p := s.mgrs[l]
		p.Signal(syscall.SIGQUIT)
		select {
		case <-p.Done():
		case <-time.After(5 * time.Second):
		}
		path := filepath.Join(artifactsDir(), fmt.Sprintf("vbcache-manager%d-%d.log", l+1, time.Now().UnixNano()))
		if err := os.WriteFile(path, []byte(p.Output()), 0o644); err == nil {
			s.t.Logf("manager%d's log and goroutines: %s", l+1, path)
		}
	}
	for i, p := range s.nodes {
		tail(fmt.Sprintf("node%d", i+1), p.Output())
	}
}

// call asks manager i.
func (s *sched) call(i int, method, path string, q url.Values) ([]byte, error) {
	u := "http://" + s.mgrHosts[i].Addr(11212) + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequest(method, u, nil)
	if err != nil {
		return nil, err
	}
	cr := nodeproc.ClusterCredentials()
	req.SetBasicAuth(cr.User, cr.Password)
	resp, err := s.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return b, fmt.Errorf("%s %s on manager %d: %s: %s", method, path, i+1, resp.Status, b)
	}
	return b, nil
}

// status is manager i's status, or false when it does not answer.
func (s *sched) status(i int) (manager.Status, bool) {
	var st manager.Status
	b, err := s.call(i, "GET", "/status", nil)
	if err != nil || json.Unmarshal(b, &st) != nil {
		return st, false
	}
	return st, true
}

// leader is the index of the manager that says it leads and that every
// answering manager names, or -1.
func (s *sched) leader() int {
	lead, names := -1, map[string]bool{}
	for i := range s.mgrHosts {
		st, ok := s.status(i)
		if !ok {
			continue
		}
		if st.Leading {
			if lead >= 0 {
				return -1
			}
			lead = i
		}
		names[st.Leader] = true
	}
	if lead < 0 || len(names) != 1 || !names["http://"+s.mgrHosts[lead].Addr(11212)] {
		return -1
	}
	return lead
}

// must runs a change on the leader, waiting up to 30 s for there to be
// one that takes it.
func (s *sched) must(method, path string, q url.Values) {
	s.t.Helper()
	var err error
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		l := s.leader()
		if l < 0 {
			continue
		}
		if _, err = s.call(l, method, path, q); err == nil {
			return
		}
	}
	s.t.Fatalf("%s %s: %v", method, path, err)
}

// leaderStatus is the leader's status, waiting up to 30 s for one.
func (s *sched) leaderStatus() manager.Status {
	s.t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if l := s.leader(); l >= 0 {
			if st, ok := s.status(l); ok && st.Leading {
				return st
			}
		}
	}
	s.t.Fatal("no leader for 30 s")
	return manager.Status{}
}

// rebalance starts a rebalance and waits for it to end.
func (s *sched) rebalance(d time.Duration) {
	s.t.Helper()
	s.must("POST", "/rebalance", nil)
	s.waitRebalanced(d)
}

func (s *sched) waitRebalanced(d time.Duration) {
	s.t.Helper()
	s.waitFor("the rebalance", d, func() bool {
		st := s.leaderStatus()
		return st.Rebalance != nil && !st.Rebalance.Running
	})
	if st := s.leaderStatus(); st.Rebalance.Err != "" {
		s.t.Fatalf("the rebalance failed: %s", st.Rebalance.Err)
	}
}

// config is the leader's map.
func (s *sched) config() *vbmap.Config {
	s.t.Helper()
	l := s.leader()
	for deadline := time.Now().Add(30 * time.Second); l < 0 && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		l = s.leader()
	}
	if l < 0 {
		s.t.Fatal("no leader for 30 s")
	}
	b, err := s.call(l, "GET", "/pools/default/b/default", nil)
	if err != nil {
		s.t.Fatal(err)
	}
	cfg, err := vbmap.Parse(b)
	if err != nil {
		s.t.Fatal(err)
	}
	return cfg
}

// members are the indexes of the nodes that hold vbuckets in the map.
func (s *sched) members() []int {
	cfg := s.config()
	var out []int
	for i, h := range s.nodeHosts {
		for j, a := range cfg.VBucketServerMap.ServerList {
			held := false
			for _, row := range cfg.VBucketServerMap.VBucketMap {
				held = held || slices.Contains(row, j)
			}
			if a == h.Addr(11211) && held {
				out = append(out, i)
			}
		}
	}
	return out
}

// oneActiveEach fails the test unless every vbucket is active on exactly
// one node (of those running).
func (s *sched) oneActiveEach() {
	s.t.Helper()
	active := make([][]string, vbuckets)
	for i, h := range s.nodeHosts {
		select {
		case <-s.nodes[i].Done():
			continue
		default:
		}
		nc, err := s.client.Dial("tcp", h.Addr(11211), 2*time.Second)
		if err != nil {
			s.t.Fatalf("%s: %v", h.Addr(11211), err)
		}
		if err := login(nc); err != nil {
			s.t.Fatalf("%s: %v", h.Addr(11211), err)
		}
		ac := admin.NewConn(nc, h.Addr(11211))
		ac.Timeout = 2 * time.Second
		for v := range vbuckets {
			st, err := ac.GetVBucket(v)
			if err != nil {
				s.t.Fatalf("GET_VBUCKET %d on %s: %v", v, h.Addr(11211), err)
			}
			if st == vbucket.Active {
				active[v] = append(active[v], h.Addr(11211))
			}
		}
		ac.Close()
	}
	for v, a := range active {
		if len(a) != 1 {
			s.t.Errorf("vbucket %d is active on %v", v, a)
		}
	}
}

// load is the schedule's clients: two through the vbucket client and two
// through the proxy, each reading and writing the keys of the current
// step (and reading those of earlier steps), recorded for the checker.
type load struct {
	rec     *history.Recorder
	step    atomic.Int64 // the fault being run: keys are s<step>-k<i>
	stop    atomic.Bool
	ops     atomic.Int64
	errs    atomic.Int64
	wg      sync.WaitGroup
	clients []*memcache.Client
}

const (
	loadKeys   = 24
	loadMaxOps = 2_000_000 // a bound, never reached by the long schedule
)

func (s *sched) startLoad(seed uint64) *load {
	l := &load{rec: history.NewRecorder()}
	s.t.Logf("the history's clock starts at %s", time.Now().Format("15:04:05.000"))
	var seeds []string
	for _, h := range s.nodeHosts {
		seeds = append(seeds, h.Addr(11211))
	}
	for range 2 {
		mc, err := memcache.NewCluster(context.Background(), seeds, &memcache.ClusterOptions{DialContext: s.client.DialContext, Timeout: time.Second})
		if err != nil {
			s.t.Fatal(err)
		}
		l.clients = append(l.clients, mc)
	}
	for range 2 {
		pc := memcache.New(s.proxyHost.Addr(22121))
		pc.DialContext, pc.Timeout = s.client.DialContext, 2*time.Second
		l.clients = append(l.clients, pc)
	}
	for cl, mc := range l.clients {
		l.wg.Add(1)
		go func() { // owned by the load: stopLoad waits for it
			defer l.wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(cl)))
			for n := 0; !l.stop.Load() && l.ops.Add(1) <= loadMaxOps; n++ {
				step := l.step.Load()
				if step > 0 && rng.IntN(4) == 0 {
					step = rng.Int64N(step) // a key of an earlier step, read only
					l.get(cl, mc, fmt.Sprintf("s%d-k%02d", step, rng.IntN(loadKeys)))
				} else if key := fmt.Sprintf("s%d-k%02d", step, rng.IntN(loadKeys)); rng.IntN(2) == 0 {
					l.set(cl, mc, key, fmt.Sprintf("c%d-%d", cl, n))
				} else {
					l.get(cl, mc, key)
				}
				time.Sleep(2 * time.Millisecond) // pacing: a bounded, modest load
			}
		}()
	}
	return l
}

func (l *load) set(cl int, mc *memcache.Client, key, v string) {
	end := l.rec.Begin(cl, history.Input{Kind: history.Set, Key: key, Value: v})
	if err := mc.Set(&memcache.Item{Key: key, Value: []byte(v)}); err != nil {
		l.errs.Add(1)
		end(history.Output{Outcome: outcomeOf(cl, err)})
		time.Sleep(20 * time.Millisecond) // a client backs off after an error
		return
	}
	end(history.Output{Outcome: history.OK})
}

// outcomeOf is what a failed write of client cl did. A write the node
// answered as ambiguous (--sync-replication could not confirm it) took
// effect before that answer or never, through the proxy too (it passes
// the answer on; it sends a write again only after a refusal, which did
// nothing). The vbucket client (clients 0 and 1) sends a request again
// only after an answer that did nothing (NOT_MY_VBUCKET, TMPFAIL before
// admission) or a dial that failed, and gives up with the last of them:
// then nothing happened. Any other error, and any other through the
// proxy, may have taken effect, at any later moment.
func outcomeOf(cl int, err error) history.Outcome {
	if errors.Is(err, memcache.ErrSyncWriteAmbiguous) {
		return history.Ambiguous
	}
	if cl >= 2 {
		return history.Unknown
	}
	var op *net.OpError
	if errors.Is(err, memcache.ErrNotMyVBucket) || errors.Is(err, memcache.ErrTemporaryFailure) || (errors.As(err, &op) && op.Op == "dial") {
		return history.Failed
	}
	return history.Unknown
}

func (l *load) get(cl int, mc *memcache.Client, key string) error {
	end := l.rec.Begin(cl, history.Input{Kind: history.Get, Key: key})
	it, err := mc.Get(key)
	switch {
	case errors.Is(err, memcache.ErrCacheMiss):
		end(history.Output{Outcome: history.OK})
		return nil
	case err != nil:
		l.errs.Add(1)
		end(history.Output{Outcome: history.Unknown})
		time.Sleep(20 * time.Millisecond) // a client backs off after an error
		return err
	}
	end(history.Output{Outcome: history.OK, Hit: true, Value: string(it.Value)})
	return nil
}

func (l *load) stopLoad() {
	l.stop.Store(true)
	l.wg.Wait()
	for _, c := range l.clients {
		c.Close()
	}
}

// served waits until a read of one never-written key in every vbucket,
// through a vbucket client and through the proxy, is answered (a miss),
// for at most d. The reads join the history.
//
// Each round reads every pair not yet served at once: a read that fails
// may take the client's whole timeout (1 s), and read one after another,
// a few vbuckets unserved for the same second would add up to seconds
// that no vbucket was unserved for.
func (s *sched) served(l *load, d time.Duration) bool {
	left := map[[2]int]bool{}
	for v := range vbuckets {
		left[[2]int{0, v}], left[[2]int{2, v}] = true, true
	}
	start := time.Now()
	var last error
	for deadline := start.Add(d); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		var mu sync.Mutex // protects left and last
		var wg sync.WaitGroup
		for _, k := range slices.Collect(maps.Keys(left)) {
			wg.Go(func() { // owned by served, which waits for the round
				err := l.get(1000+k[0]*vbuckets+k[1], l.clients[k[0]], probeKeys[k[1]])
				mu.Lock()
				defer mu.Unlock()
				if err == nil {
					delete(left, k)
				} else {
					last = fmt.Errorf("client %d, vbucket %d: %w", k[0], k[1], err)
				}
			})
		}
		wg.Wait()
		if len(left) == 0 {
			if time.Since(start) > time.Second {
				s.t.Logf("every vbucket served after %v; the last error: %v", time.Since(start), last)
			}
			return true
		}
	}
	s.t.Logf("%d (client, vbucket) pairs not served after %v; the last error: %v", len(left), d, last)
	return false
}

// probeKeys holds a never-written key of each vbucket.
var probeKeys = func() []string {
	keys := make([]string, vbuckets)
	for i, n := 0, 0; n < vbuckets; i++ {
		k := fmt.Sprintf("probe%d", i)
		if v := vbmap.VBucketString(k, vbuckets); keys[v] == "" {
			keys[v] = k
			n++
		}
	}
	return keys
}()

// stepResult is one fault of a schedule as it ran.
type stepResult struct {
	fault    string
	victim   string
	effect   time.Duration // from the fault to what ends it (a failover, a new leader, the cut's end)
	recovery time.Duration // from the heal until every vbucket was served
	ops      int64
	spurious int // other nodes failed over meanwhile

	// With asynchronous replication, what the victim node may have lost:
	// the acknowledged writes of its active vbuckets (as the map had them
	// before the fault) from window[0] (a second before sampled) to
	// window[1] (its failover seen), on the history's clock, are the
	// candidates; behind is the seqnos its streams were behind at sampled
	// (stats streams' seqno_behind, as ctl streams shows it), and after
	// the candidates acknowledged after sampled. A lost write was behind
	// at sampled or acknowledged after it: behind+after bounds lost.
	lossy   bool
	vbs     map[int]bool
	window  [2]int64
	sampled int64
	behind  int
	after   int
	lost    int
}

// TestSchedule runs a seeded random schedule of faults under a recorded
// read/write load through the vbucket client and the proxy, on a cluster
// of three managers and four or five nodes with --sync-replication (the
// shape drawn from the seed: pickTopology), and checks after every fault
// that each vbucket has exactly one active and that every vbucket is
// served again within topology.recover of the heal, and at the end that
// the history is linearizable under the no-loss cache model (no eviction
// or expiry can happen here: an acknowledged write missing is a lost
// write). -seed replays a schedule; -faults N runs each fault N times
// (default 8; -long 30; -short 2).
func TestSchedule(t *testing.T) { runSchedule(t, false, 8, 30) }

// TestScheduleAsync is TestSchedule with asynchronous replication: the
// writes a failed node acknowledged around its failure may be lost; they
// are counted, and each fault's losses must stay within what its best
// replica was behind just before it (per vbucket, the least of its
// streams') plus what it acknowledged after that. Any other departure
// from the no-loss model is a violation. By default each fault runs 8
// times (-long: 30 times).
func TestScheduleAsync(t *testing.T) { runSchedule(t, true, 8, 30) }

// runSchedule runs each fault n times, long times with -long, on a
// cluster whose shape the seed draws.
func runSchedule(t *testing.T, async bool, n, long int) {
	seed := *seedFlag
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	switch {
	case *perFault > 0:
		n = *perFault
	case *longFlag:
		n = long
	case testing.Short():
		n = 2
	}
	t.Logf("schedule seed %d (replay: go test ./test/faults -run '%s$' -v -seed %d -faults %d)", seed, t.Name(), seed, n)
	topo := pickTopology(t, seed)
	t.Logf("the cluster: %v", topo)
	rng := rand.New(rand.NewPCG(seed, 0))
	var plan []string
	for _, f := range allFaults {
		if *onlyFlag != "" && !slices.Contains(strings.Split(*onlyFlag, ","), f) {
			continue
		}
		runs := n
		if slowFaults[f] {
			runs = (n + 1) / 2
		}
		for range runs {
			plan = append(plan, f)
		}
	}
	rng.Shuffle(len(plan), func(i, j int) { plan[i], plan[j] = plan[j], plan[i] })

	s := startSched(t, async, topo)
	began := time.Now()
	l := s.startLoad(seed)
	stopped := false
	defer func() {
		if !stopped {
			l.stopLoad()
		}
	}()
	var results []stepResult
	for i, f := range plan {
		l.step.Store(int64(i + 1))
		before := l.ops.Load()
		warm := l.rec.Len() + 100
		s.waitFor("load before the fault", 30*time.Second, func() bool { return l.rec.Len() >= warm })
		r := s.runFault(l, rng, f)
		r.ops = l.ops.Load() - before
		results = append(results, r)
		t.Logf("step %d/%d %s on %s: ended %v after it, every vbucket served %v after the heal (%d operations)",
			i+1, len(plan), f, r.victim, r.effect.Round(time.Millisecond), r.recovery.Round(time.Millisecond), r.ops)
		if t.Failed() {
			t.Logf("stopping the schedule at step %d; replay with -seed %d", i+1, seed)
			break
		}
	}
	l.stopLoad()
	stopped = true
	elapsed := time.Since(began)

	h := l.rec.Operations()
	unsure := 0
	for _, o := range h {
		if o.Output.(history.Output).Outcome != history.OK {
			unsure++
		}
	}
	checkStart := time.Now()
	var res history.Result
	if !async {
		res = history.CheckModel(history.NoLossModel, h, 5*time.Minute)
	} else {
		var lost []porcupine.Operation
		res, lost = history.Losses(history.NoLossModel, h, func(o porcupine.Operation) bool {
			in := o.Input.(history.Input)
			for _, r := range results {
				if r.lossy && o.Return >= r.window[0] && o.Return <= r.window[1] && r.vbs[vbmap.VBucketString(in.Key, vbuckets)] {
					return true
				}
			}
			return false
		}, 5*time.Minute)
		total := 0
		for _, o := range lost {
			for i := range results {
				if r := &results[i]; r.lossy && o.Return >= r.window[0] && o.Return <= r.window[1] {
					r.lost++
					total++
					break
				}
			}
		}
		for i, r := range results {
			if !r.lossy {
				continue
			}
			t.Logf("step %d %s on %s: %d acknowledged writes lost; just before the fault its streams were %d seqnos behind, and %d writes of its vbuckets were acknowledged from then until its failover",
				i+1, r.fault, r.victim, r.lost, r.behind, r.after)
			if r.lost > r.behind+r.after {
				t.Errorf("step %d %s on %s: %d writes lost, more than the %d its streams were behind plus the %d acknowledged after", i+1, r.fault, r.victim, r.lost, r.behind, r.after)
			}
		}
		t.Logf("%d acknowledged writes lost in all", total)
	}
	t.Logf("schedule seed %d: %d faults in %v, %d operations (%d without a definite answer), checked in %v: linearizable with no write lost%s: %v",
		seed, len(results), elapsed.Round(time.Second), len(h), unsure, time.Since(checkStart).Round(time.Millisecond), map[bool]string{true: " but those counted", false: ""}[async], res.OK)
	summarize(t, results)
	if !res.OK {
		for k, ops := range history.Violations(history.NoLossModel, h, time.Minute) {
			n := history.FirstFailure(history.NoLossModel, ops, time.Minute)
			var lines []string
			for _, o := range ops[max(0, n-60):min(len(ops), n+10)] {
				lines = append(lines, history.Describe(o))
			}
			t.Logf("key %s (vbucket %d) is not linearizable; its first %d operations are not (operations %d to %d shown):\n%s",
				k, vbmap.VBucketString(k, vbuckets), n, max(0, n-60)+1, min(len(ops), n+10), strings.Join(lines, "\n"))
		}
		s.dumpAll()
		path := writeVisualisation(t, res, fmt.Sprintf("schedule-%d", seed))
		if res.TimedOut {
			t.Fatalf("porcupine could not decide within 5 minutes (%s)", path)
		}
		t.Fatalf("the history is not linearizable under the no-loss cache model (seed %d; %s)", seed, path)
	}
}

// summarize logs, per fault, how often it ran and its worst times.
func summarize(t *testing.T, results []stepResult) {
	for _, f := range allFaults {
		var runs, spurious int
		var effect, recovery time.Duration
		for _, r := range results {
			if r.fault == f {
				runs++
				effect, recovery = max(effect, r.effect), max(recovery, r.recovery)
				spurious += r.spurious
			}
		}
		t.Logf("  %-20s %2d runs, ended within %v, every vbucket served within %v of the heal, %d other nodes failed over", f, runs, effect.Round(time.Millisecond), recovery.Round(time.Millisecond), spurious)
	}
}

// runFault injects f, waits for what ends it, heals, checks recovery,
// and puts the cluster back as it was (a failed-over node added again).
func (s *sched) runFault(l *load, rng *rand.Rand, f string) stepResult {
	t := s.t
	r := stepResult{fault: f}
	members := s.members()
	vi := members[rng.IntN(len(members))]
	victim := s.nodeHosts[vi]
	va := victim.Addr(11211)
	if f == fPauseTargetMidReb || f == fCutTargetMidReb {
		// The victim is the spare, which must join: if it is a member,
		// it leaves first.
		si := s.spare()
		spare := s.nodeHosts[si].Addr(11211)
		if slices.Contains(members, si) {
			s.must("DELETE", "/nodes", url.Values{"node": {spare}})
			s.rebalance(2 * time.Minute)
			members = s.members()
		}
		vi, victim, va = si, s.nodeHosts[si], spare
	}
	r.victim = va
	s.t.Logf("%s: %s on %s", time.Now().Format("15:04:05.000"), f, va)
	failedOver := func() bool { return slices.Contains(s.leaderStatus().FailedOver, va) }
	var healAt time.Time // when the fault ended: healed, or the killed node failed over
	if s.async && lossyFaults[f] {
		r.lossy, r.vbs = true, map[int]bool{}
		activeOn(s.config(), va, r.vbs)
		r.sampled = l.rec.Now()
		r.window[0] = r.sampled - time.Second.Nanoseconds()
		r.behind = s.behind(va)
	}
	start := time.Now()
	ended := func() {
		r.effect = time.Since(start)
		r.window[1] = l.rec.Now()
	}
	switch f {
	case fCutFromManagers:
		for _, m := range s.mgrHosts {
			s.lab.Cut(m, victim)
		}
		s.waitFor("the failover of "+va, 60*time.Second, failedOver)
		ended()
		s.lab.Heal(victim)
		healAt = time.Now()
	case fIsolateNode:
		s.isolate(victim)
		s.waitFor("the failover of "+va, 60*time.Second, failedOver)
		ended()
		s.healAll()
		healAt = time.Now()
	case fPauseNode:
		s.nodes[vi].Signal(syscall.SIGSTOP)
		s.waitFor("the failover of "+va, 60*time.Second, failedOver)
		ended()
		s.nodes[vi].Signal(syscall.SIGCONT)
		healAt = time.Now()
	case fKillNode:
		s.nodes[vi].Signal(syscall.SIGKILL)
		<-s.nodes[vi].Done()
		s.waitFor("the failover of "+va, 60*time.Second, failedOver)
		ended()
		healAt = time.Now()
		s.startNode(vi)
	case fRestartNode:
		s.nodes[vi].Signal(syscall.SIGKILL)
		<-s.nodes[vi].Done()
		s.startNode(vi)
		s.waitFor("the failover of restarted "+va, 60*time.Second, failedOver)
		ended()
		healAt = time.Now()
	case fCutClientNode:
		s.lab.Partition(s.client, victim)
		time.Sleep(2 * time.Second) // the fault's duration, not a wait for a condition
		r.effect = time.Since(start)
		s.lab.Heal(victim)
		s.lab.Heal(s.client)
		healAt = time.Now()
	case fCutManagerEtcd:
		lead := s.leader()
		for lead < 0 {
			s.leaderStatus()
			lead = s.leader()
		}
		lm := s.mgrHosts[lead]
		r.victim = "manager" + fmt.Sprint(lead+1)
		for _, m := range s.mgrHosts {
			if m != lm {
				s.lab.Partition(m, lm)
			}
		}
		s.waitFor("another leader", 60*time.Second, func() bool {
			for i := range s.mgrHosts {
				if st, ok := s.status(i); ok && st.Leading && i != lead {
					return true
				}
			}
			return false
		})
		r.effect = time.Since(start)
		for _, m := range s.mgrHosts {
			s.lab.Heal(m)
		}
		healAt = time.Now()
	case fKillNodeMidReb:
		s.movingRebalance(members)
		// The rebalance may move vbuckets to the victim: writes it
		// acknowledges for them before the kill may be lost too.
		if r.lossy {
			activeOn(s.config(), va, r.vbs)
		}
		start = time.Now()
		s.nodes[vi].Signal(syscall.SIGKILL)
		<-s.nodes[vi].Done()
		s.waitFor("the failover of "+va, 60*time.Second, failedOver)
		ended()
		healAt = time.Now()
		s.startNode(vi)
	case fRestartNodeMidReb:
		s.movingRebalance(members)
		if r.lossy {
			activeOn(s.config(), va, r.vbs)
		}
		start = time.Now()
		s.nodes[vi].Signal(syscall.SIGKILL)
		<-s.nodes[vi].Done()
		s.startNode(vi)
		s.waitFor("the failover of restarted "+va, 60*time.Second, failedOver)
		ended()
		healAt = time.Now()
	case fPauseTargetMidReb, fCutTargetMidReb:
		s.movingRebalance(members) // the victim joins: vbuckets move into it
		if r.lossy {
			// What it holds or is being given by now, and how far its
			// streams are behind, for the writes it may lose.
			activeOn(s.config(), va, r.vbs)
			r.behind = s.behind(va)
		}
		start = time.Now()
		if f == fPauseTargetMidReb {
			s.nodes[vi].Signal(syscall.SIGSTOP)
		} else {
			s.isolate(victim)
		}
		s.waitFor("the failover of "+va, 60*time.Second, failedOver)
		ended()
		if f == fPauseTargetMidReb {
			s.nodes[vi].Signal(syscall.SIGCONT)
		} else {
			s.healAll()
		}
		healAt = time.Now()
	case fKillNodeKillLeader:
		lead := s.leader()
		for lead < 0 {
			s.leaderStatus()
			lead = s.leader()
		}
		s.nodes[vi].Signal(syscall.SIGKILL)
		s.mgrs[lead].Signal(syscall.SIGKILL)
		<-s.nodes[vi].Done()
		<-s.mgrs[lead].Done()
		s.waitFor("the failover of "+va+" by a new leader", 60*time.Second, func() bool {
			for i := range s.mgrHosts {
				if st, ok := s.status(i); ok && i != lead && st.Leading && slices.Contains(st.FailedOver, va) {
					return true
				}
			}
			return false
		})
		ended()
		healAt = time.Now()
		s.startNode(vi)
		defer s.restartManager(lead)
	case fRestartDuringFailover:
		lead := s.leader()
		for lead < 0 {
			s.leaderStatus()
			lead = s.leader()
		}
		mark := len(s.mgrs[lead].Output())
		s.nodes[vi].Signal(syscall.SIGKILL)
		<-s.nodes[vi].Done()
		s.waitFor("the failover of "+va+" to begin", 60*time.Second, func() bool {
			return strings.Contains(s.mgrs[lead].Output()[mark:], va+" down since")
		})
		s.startNode(vi)
		s.waitFor("the failover of "+va, 60*time.Second, failedOver)
		ended()
		healAt = time.Now()
	case fPauseNodeCutLeader:
		lead := s.leader()
		for lead < 0 {
			s.leaderStatus()
			lead = s.leader()
		}
		lm := s.mgrHosts[lead]
		s.nodes[vi].Signal(syscall.SIGSTOP)
		for _, m := range s.mgrHosts {
			if m != lm {
				s.lab.Partition(m, lm)
			}
		}
		// The cut-off leader names itself until its session ends, and
		// the others' leader after that only once healed: the new
		// leader's own status says what it did.
		s.waitFor("the failover of "+va+" by another leader", 60*time.Second, func() bool {
			for i := range s.mgrHosts {
				if i == lead {
					continue
				}
				if st, ok := s.status(i); ok && st.Leading && slices.Contains(st.FailedOver, va) {
					return true
				}
			}
			return false
		})
		ended()
		for _, m := range s.mgrHosts {
			s.lab.Heal(m)
		}
		s.nodes[vi].Signal(syscall.SIGCONT)
		healAt = time.Now()
	case fPauseLeaderMidReb:
		lead := s.movingRebalance(members)
		r.victim = "manager" + fmt.Sprint(lead+1)
		start = time.Now()
		s.mgrs[lead].Signal(syscall.SIGSTOP)
		s.waitFor("another leader", 60*time.Second, func() bool {
			for i := range s.mgrHosts {
				if i == lead {
					continue // paused: its API does not answer
				}
				if st, ok := s.status(i); ok && st.Leading {
					return true
				}
			}
			return false
		})
		r.effect = time.Since(start)
		s.mgrs[lead].Signal(syscall.SIGCONT)
		healAt = time.Now()
	case fKillLeaderMidReb:
		lead := s.movingRebalance(members)
		r.victim = "manager" + fmt.Sprint(lead+1)
		start = time.Now()
		s.mgrs[lead].Signal(syscall.SIGKILL)
		<-s.mgrs[lead].Done()
		s.waitFor("a new leader", 60*time.Second, func() bool {
			for i := range s.mgrHosts {
				if st, ok := s.status(i); ok && st.Leading && i != lead {
					return true
				}
			}
			return false
		})
		r.effect = time.Since(start)
		healAt = time.Now()
		defer s.restartManager(lead)
	default:
		t.Fatalf("unknown fault %q", f)
	}
	ok := s.served(l, 30*time.Second)
	r.recovery = time.Since(healAt)
	s.waitFor("one leader", 60*time.Second, func() bool { return s.leader() >= 0 })
	if !ok || r.recovery > s.topo.recover() {
		t.Errorf("%s on %s: every vbucket served %v after the heal (at most %v allowed; all served: %v)", f, r.victim, r.recovery, s.topo.recover(), ok)
		s.failoverLines()
		s.dumpAll()
	}
	// A move's target paused or cut off in its handover is failed over
	// within the lease plus --failover-after plus a second of the fault
	// (issue 43), as any node is: nothing waits for it (it took 5-12 s
	// when the rebalance waited out its timeouts). A second more is
	// allowed for a loaded CI machine; test/cluster's
	// TestPausedMoveTargetIsFailedOverInTime holds the exact bound.
	if (f == fPauseTargetMidReb || f == fCutTargetMidReb) && r.effect > s.topo.recover()+time.Second {
		t.Errorf("%s on %s: failed over %v after the fault (at most %v allowed)", f, r.victim, r.effect, s.topo.recover()+time.Second)
		s.failoverLines()
	}
	// Back to a steady cluster: a failed-over node joins again, and a
	// rebalance gives it vbuckets or finishes an interrupted one.
	// (A failover starts a rebalance that rebuilds replicas: it ends
	// first.)
	notRunning := func() bool {
		st := s.leaderStatus()
		return st.Rebalance == nil || !st.Rebalance.Running
	}
	s.waitFor("the rebalance to end", 2*time.Minute, notRunning)
	st := s.leaderStatus()
	for _, a := range st.FailedOver {
		if a != va || f == fCutClientNode || f == fCutManagerEtcd || f == fKillLeaderMidReb || f == fPauseLeaderMidReb {
			t.Logf("%s: %s was failed over too", f, a)
			r.spurious++
		}
		s.must("POST", "/nodes", url.Values{"node": {a}})
	}
	if len(st.FailedOver) > 0 || f == fKillLeaderMidReb || f == fPauseLeaderMidReb || f == fKillNodeMidReb || (st.Rebalance != nil && st.Rebalance.Err != "") {
		s.rebalance(2 * time.Minute)
	}
	s.oneActiveEach()
	if r.lossy {
		for _, o := range l.rec.Operations() {
			in := o.Input.(history.Input)
			if in.Kind == history.Set && o.Output.(history.Output).Outcome == history.OK && o.Return > r.sampled && o.Return <= r.window[1] && r.vbs[vbmap.VBucketString(in.Key, vbuckets)] {
				r.after++
			}
		}
	}
	return r
}

// activeOn adds to vbs the vbuckets whose active is addr in cfg's map or
// in its forward map (the running rebalance's target).
func activeOn(cfg *vbmap.Config, addr string, vbs map[int]bool) {
	m := cfg.VBucketServerMap
	for _, rows := range [][][]int{m.VBucketMap, m.VBucketMapForward} {
		for v, row := range rows {
			if len(row) > 0 && row[0] >= 0 && m.ServerList[row[0]] == addr {
				vbs[v] = true
			}
		}
	}
}

// behind is how many seqnos node addr's best replicas are behind: per
// vbucket, the least seqno_behind of its producer's streams (stats
// streams), summed. With one replica that is each stream's; with two,
// the failover promotes the replica that holds the most, so a write
// either replica has is not lost.
func (s *sched) behind(addr string) int {
	s.t.Helper()
	nc, err := s.client.Dial("tcp", addr, 2*time.Second)
	if err != nil {
		s.t.Fatalf("%s: %v", addr, err)
	}
	if err := login(nc); err != nil {
		s.t.Fatalf("%s: %v", addr, err)
	}
	ac := admin.NewConn(nc, addr)
	ac.Timeout = 2 * time.Second
	defer ac.Close()
	lines, err := ac.Stats("streams")
	if err != nil {
		s.t.Fatalf("stats streams on %s: %v", addr, err)
	}
	least := map[string]int{} // by vbucket
	for _, kv := range lines {
		// producer:<consumer, an address>:vb_<n>:seqno_behind
		k, ok := strings.CutSuffix(kv[0], ":seqno_behind")
		if !ok || !strings.HasPrefix(k, "producer:") {
			continue
		}
		vb := k[strings.LastIndexByte(k, ':')+1:]
		b, _ := strconv.Atoi(kv[1])
		if n, ok := least[vb]; !ok || b < n {
			least[vb] = b
		}
	}
	n := 0
	for _, b := range least {
		n += b
	}
	return n
}

// movingRebalance starts a rebalance that moves vbuckets (the spare
// joins, or leaves if it is a member) and waits until it has moved one;
// it returns the leader running it.
func (s *sched) movingRebalance(members []int) int {
	spare := s.nodeHosts[s.spare()].Addr(11211)
	if slices.Contains(members, s.spare()) {
		s.must("DELETE", "/nodes", url.Values{"node": {spare}})
	} else {
		s.must("POST", "/nodes", url.Values{"node": {spare}})
	}
	s.must("POST", "/rebalance", nil)
	lead := -1
	s.waitFor("the rebalance to move a vbucket", 30*time.Second, func() bool {
		st := s.leaderStatus()
		lead = s.leader()
		return st.Rebalance != nil && st.Rebalance.Running && st.Rebalance.Done >= 1 && lead >= 0
	})
	return lead
}

// isolate cuts victim off from every other host, both ways.
func (s *sched) isolate(victim *netlab.Host) {
	for _, h := range s.allHosts() {
		if h != victim {
			s.lab.Partition(h, victim)
		}
	}
}

// healAll ends every cut and partition.
func (s *sched) healAll() {
	for _, h := range s.allHosts() {
		s.lab.Heal(h)
	}
}

// restartManager starts killed manager i again and waits for one leader.
func (s *sched) restartManager(i int) {
	s.past = append(s.past, fmt.Sprintf("manager%d, until %s:\n%s", i+1, time.Now().Format("15:04:05.000"), s.mgrs[i].Output()))
	s.mgrs[i] = s.mgrHosts[i].Start(s.t, vbcacheBin, s.mgrArgs[i]...)
	s.mgrs[i].WaitListening(s.t, s.client, s.mgrHosts[i].Addr(11212), 60*time.Second)
	s.waitFor("one leader", 60*time.Second, func() bool { return s.leader() >= 0 })
}

func (s *sched) allHosts() []*netlab.Host {
	return append(append([]*netlab.Host{s.client, s.proxyHost}, s.mgrHosts...), s.nodeHosts...)
}
