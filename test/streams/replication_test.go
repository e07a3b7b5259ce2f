package streams

import (
	"bufio"
	"fmt"
	"net"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vbcache/vbcache/internal/admin"
	"github.com/vbcache/vbcache/internal/protocol"
	"github.com/vbcache/vbcache/internal/vbucket"
)

// want is what each key of a vbucket should hold ("" with ok false: gone).
type want map[string]string

// checkReplica waits until every key of w reads back from the replica
// (GET_REPLICA) as w says, deletions included.
func checkReplica(t *testing.T, c *ctl, vb int, w want) {
	t.Helper()
	eventually(t, 20*time.Second, func() (bool, string) {
		for k, v := range w {
			got, ok := c.getOp(protocol.OpGetReplica, vb, k)
			if (v == "") == ok || got != v {
				return false, fmt.Sprintf("%s on replica %s: %q (present %v), want %q", k, c.Addr, got, ok, v)
			}
		}
		return true, ""
	})
}

// TestReplicaCatchesUpFromLog: a replica started after some writes gets
// them by backfill, and the writes and deletions after it from the log.
func TestReplicaCatchesUpFromLog(t *testing.T) {
	nodes := startNodes(t, 2)
	a, r := dialCtl(t, nodes[0].Addr), dialCtl(t, nodes[1].Addr)
	const vb = 3
	a.setState(vb, vbucket.Active)
	keys := keysFor("log", vb, 400)
	w := want{}
	for i, k := range keys[:200] {
		a.set(vb, k, "before"+strconv.Itoa(i))
		w[k] = "before" + strconv.Itoa(i)
	}
	r.must(r.Replicate(vb, a.Addr), "REPLICATE")
	for i, k := range keys[200:] {
		a.set(vb, k, "after"+strconv.Itoa(i))
		w[k] = "after" + strconv.Itoa(i)
	}
	for i := 0; i < 200; i += 10 { // deletions of backfilled keys
		k := keys[i]
		a.del(vb, k)
		w[k] = ""
	}
	for _, k := range keys[250:300] { // overwrites of live ones
		a.set(vb, k, "again")
		w[k] = "again"
	}
	checkReplica(t, r, vb, w)
	if st := r.state(vb); st != vbucket.Replica {
		t.Errorf("replica state %v", st)
	}
	// Caught up: the active's producer stream shows no lag.
	eventually(t, 10*time.Second, func() (bool, string) {
		m := a.stats("streams")
		sb, _ := streamStat(m, fmt.Sprintf("vb_%d:", vb), ":seqno_behind")
		bb, _ := streamStat(m, fmt.Sprintf("vb_%d:", vb), ":bytes_behind")
		return sb == "0" && bb == "0", fmt.Sprintf("seqno_behind %q bytes_behind %q", sb, bb)
	})
}

// TestReplicaBackfillAfterLogOverflow: a replica whose stream was stopped
// while the active's log ring (--stream-log-bytes=65536) overflowed
// starts over with a full backfill when replication resumes, and ends
// with every key and every deletion right.
func TestReplicaBackfillAfterLogOverflow(t *testing.T) {
	nodes := startNodes(t, 2, "--stream-log-bytes=65536")
	a, r := dialCtl(t, nodes[0].Addr), dialCtl(t, nodes[1].Addr)
	const vb = 11
	a.setState(vb, vbucket.Active)
	keys := keysFor("ovf", vb, 300)
	w := want{}
	for _, k := range keys {
		a.set(vb, k, "v0")
		w[k] = "v0"
	}
	r.must(r.Replicate(vb, a.Addr), "REPLICATE")
	checkReplica(t, r, vb, w)
	r.must(r.StopReplication(vb), "STOP_REPLICATION")
	// 40 passes over 300 keys: 12,000 mutations, far more entries than a
	// 64 KiB ring holds (24 bytes each plus the key).
	const passes = 40
	for p := 1; p <= passes; p++ {
		for i, k := range keys {
			switch {
			case i%7 == 0 && p%2 == 1:
				a.del(vb, k) // deleted and written again, alternately
			default:
				a.set(vb, k, "v"+strconv.Itoa(p))
				w[k] = "v" + strconv.Itoa(p)
			}
		}
	}
	for i := 0; i < len(keys); i += 14 { // and some gone for good
		a.del(vb, keys[i])
		w[keys[i]] = ""
	}
	// Stopped: the replica still has the old values.
	if got, _ := r.getOp(protocol.OpGetReplica, vb, keys[1]); got != "v0" {
		t.Fatalf("replica moved on while stopped: %q", got)
	}
	r.must(r.Replicate(vb, a.Addr), "REPLICATE again")
	checkReplica(t, r, vb, w)
	// It was a backfill: the stream sent about one item per live key,
	// not one per mutation since the stop.
	m := a.stats("streams")
	sent, ok := streamStat(m, fmt.Sprintf("vb_%d:", vb), ":items_sent")
	n, _ := strconv.Atoi(sent)
	if !ok || n == 0 || n > 2*len(keys) {
		t.Errorf("items_sent %q after the resume, want a backfill of about %d items (stats: %v)", sent, len(keys), m)
	}
	if rb, _ := strconv.Atoi(m["log_ring_bytes"]); rb > 65536 {
		t.Errorf("log_ring_bytes %d over the 65536 budget", rb)
	}
}

// TestReplicationStarAndChain: r1 and r2 replicate from the active
// (star), r3 from r1 (chained), all three set up before the writes end
// and while r1 is still backfilling; all end identical to the active.
func TestReplicationStarAndChain(t *testing.T) {
	nodes := startNodes(t, 4)
	a := dialCtl(t, nodes[0].Addr)
	r1, r2, r3 := dialCtl(t, nodes[1].Addr), dialCtl(t, nodes[2].Addr), dialCtl(t, nodes[3].Addr)
	const vb = 17
	a.setState(vb, vbucket.Active)
	keys := keysFor("star", vb, 3000)
	w := want{}
	val := strings.Repeat("s", 200)
	for i, k := range keys[:2000] {
		a.set(vb, k, val+strconv.Itoa(i))
		w[k] = val + strconv.Itoa(i)
	}
	r1.must(r1.Replicate(vb, a.Addr), "REPLICATE r1 ← a")
	r3.must(r3.Replicate(vb, r1.Addr), "REPLICATE r3 ← r1")
	r2.must(r2.Replicate(vb, a.Addr), "REPLICATE r2 ← a")
	for i, k := range keys[2000:] {
		a.set(vb, k, "live"+strconv.Itoa(i))
		w[k] = "live" + strconv.Itoa(i)
	}
	for i := 0; i < 2000; i += 13 {
		k := keys[i]
		a.del(vb, k)
		w[k] = ""
	}
	for _, c := range []*ctl{r1, r2, r3} {
		checkReplica(t, c, vb, w)
	}
	// r1 is a producer too (for r3), and its stream shows no lag.
	eventually(t, 10*time.Second, func() (bool, string) {
		m := r1.stats("streams")
		sb, ok := streamStat(m, "producer:"+r3.Addr+fmt.Sprintf(":vb_%d:", vb), ":seqno_behind")
		return ok && sb == "0", fmt.Sprintf("r1's stream to r3: seqno_behind %q (%v)", sb, m)
	})
}

// TestPromoteReplicaAfterActiveKilled: once the active's stats show the
// replica acknowledged everything (seqno_behind 0), SIGKILL the active and
// promote the replica: it has every write.
func TestPromoteReplicaAfterActiveKilled(t *testing.T) {
	nodes := startNodes(t, 2)
	a, r := dialCtl(t, nodes[0].Addr), dialCtl(t, nodes[1].Addr)
	const vb = 21
	a.setState(vb, vbucket.Active)
	r.must(r.Replicate(vb, a.Addr), "REPLICATE")
	keys := keysFor("promo", vb, 1000)
	for i, k := range keys {
		a.set(vb, k, "p"+strconv.Itoa(i))
	}
	a.del(vb, keys[0])
	eventually(t, 10*time.Second, func() (bool, string) {
		m := a.stats("streams")
		high, _ := streamStat(m, fmt.Sprintf("vb_%d:", vb), ":high_seqno")
		acked, _ := streamStat(m, fmt.Sprintf("vb_%d:", vb), ":acked_seqno")
		sb, _ := streamStat(m, fmt.Sprintf("vb_%d:", vb), ":seqno_behind")
		return sb == "0" && high == strconv.Itoa(len(keys)+1) && acked == high,
			fmt.Sprintf("high %s acked %s behind %s", high, acked, sb)
	})
	if err := nodes[0].Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if !nodes[0].WaitExit(10 * time.Second) {
		t.Fatal("the active did not die")
	}
	r.setState(vb, vbucket.Active)
	for i, k := range keys {
		got, ok := r.getOp(protocol.OpGet, vb, k)
		if i == 0 {
			if ok {
				t.Errorf("%s was deleted on the active, promoted replica has %q", k, got)
			}
			continue
		}
		if want := "p" + strconv.Itoa(i); got != want {
			t.Fatalf("%s on the promoted replica: %q (present %v), want %q", k, got, ok, want)
		}
	}
	// It serves writes as the active now.
	r.set(vb, keys[0], "after-promotion")
	if got, _ := r.getOp(protocol.OpGet, vb, keys[0]); got != "after-promotion" {
		t.Errorf("write after promotion: %q", got)
	}
}

// TestTakeoverOntoItsReplica: a TAKEOVER on the node that already
// replicates the vbucket continues from the replica's position and ends
// with the replica active holding everything, the old active dead.
func TestTakeoverOntoItsReplica(t *testing.T) {
	nodes := startNodes(t, 2)
	a, r := dialCtl(t, nodes[0].Addr), dialCtl(t, nodes[1].Addr)
	const vb = 25
	a.setState(vb, vbucket.Active)
	r.must(r.Replicate(vb, a.Addr), "REPLICATE")
	keys := keysFor("tor", vb, 600)
	w := want{}
	for i, k := range keys[:400] {
		a.set(vb, k, "r"+strconv.Itoa(i))
		w[k] = "r" + strconv.Itoa(i)
	}
	checkReplica(t, r, vb, w)
	for i, k := range keys[400:] { // some the replica may not have yet
		a.set(vb, k, "t"+strconv.Itoa(i))
	}
	a.del(vb, keys[0])
	r.must(r.Takeover(vb, a.Addr), "TAKEOVER")
	if st := a.state(vb); st != vbucket.Dead {
		t.Errorf("old active is %v, want dead", st)
	}
	if st := r.state(vb); st != vbucket.Active {
		t.Fatalf("new active is %v", st)
	}
	for i, k := range keys {
		got, ok := r.getOp(protocol.OpGet, vb, k)
		want := "r" + strconv.Itoa(i)
		if i >= 400 {
			want = "t" + strconv.Itoa(i-400)
		}
		if i == 0 {
			if ok {
				t.Errorf("%s deleted before the takeover, new active has %q", k, got)
			}
			continue
		}
		if got != want {
			t.Fatalf("%s on the new active: %q (present %v), want %q", k, got, ok, want)
		}
	}
}

// TestSyncReplication: an active started with --sync-replication answers
// a write only once its replica has it, so GET_REPLICA on the replica,
// sent right after each answer, always reads the value just written. The
// same loop against an active without the flag finds the replica behind
// at least once (the lag this closes); it is logged, not required, since
// a fast enough replica may win every race.
func TestSyncReplication(t *testing.T) {
	run := func(flags ...string) (behind int, waits string) {
		nodes := startNodes(t, 2, flags...)
		a, r := dialCtl(t, nodes[0].Addr), dialCtl(t, nodes[1].Addr)
		const vb = 5
		a.setState(vb, vbucket.Active)
		r.must(r.Replicate(vb, a.Addr), "REPLICATE")
		// A vbucket no stream copies yet is answered at once: start once
		// the active feeds the replica.
		eventually(t, 10*time.Second, func() (bool, string) {
			_, ok := streamStat(a.stats("streams"), fmt.Sprintf("vb_%d:", vb), ":seqno_behind")
			return ok, "no stream of the vbucket on the active"
		})
		keys := keysFor("sync", vb, 20)
		for i := range 400 {
			k, v := keys[i%len(keys)], "v"+strconv.Itoa(i)
			a.set(vb, k, v)
			if got, ok := r.getOp(protocol.OpGetReplica, vb, k); !ok || got != v {
				behind++
			}
		}
		return behind, a.stats("vbucket")["sync_replication_waits"]
	}
	behind, waits := run("--sync-replication")
	if behind != 0 {
		t.Errorf("with --sync-replication, the replica lacked %d of 400 acknowledged writes", behind)
	}
	if n, _ := strconv.Atoi(waits); n == 0 {
		t.Errorf("sync_replication_waits %q: no write waited", waits)
	}
	async, _ := run()
	t.Logf("without it, the replica lacked %d of 400 writes when read right after the answer; with it, 0 (%s writes waited)", async, waits)
}

// TestSyncReplicationWantsTheMapsReplica: with --sync-replication, a
// write to a vbucket that the node's cluster map gives a replica waits
// while no stream copies it (a new active before its replica's stream
// opens), and is answered once the replica's stream has it; a newer map
// that gives the vbucket no replica releases such a wait at once.
func TestSyncReplicationWantsTheMapsReplica(t *testing.T) {
	nodes := startNodes(t, 2, "--sync-replication", "--pending-timeout", "20s")
	a, r := dialCtl(t, nodes[0].Addr), dialCtl(t, nodes[1].Addr)
	mapJSON := func(rev int, replica int) []byte {
		rows := make([]string, numVBuckets)
		for i := range rows {
			rows[i] = fmt.Sprintf("[0,%d]", replica)
		}
		return fmt.Appendf(nil, `{"rev":%d,"name":"default","nodeLocator":"vbucket","vBucketServerMap":{"hashAlgorithm":"CRC","numReplicas":1,"serverList":[%q,%q],"vBucketMap":[%s]}}`,
			rev, nodes[0].Addr, nodes[1].Addr, strings.Join(rows, ","))
	}
	a.must(a.SetClusterConfig(mapJSON(1, 1), 0, 1), "SET_CLUSTER_CONFIG")
	waits := func() int {
		n, _ := strconv.Atoi(a.stats("vbucket")["sync_replication_waits"])
		return n
	}
	// write sets key on vb over a connection of its own and reports the
	// outcome on the channel it returns.
	write := func(vb int, key, val string) <-chan error {
		c := dialCtl(t, nodes[0].Addr)
		done := make(chan error, 1)
		go func() { // owned by the test: it reads done before returning
			_, err := c.Do(protocol.OpSet, uint16(vb), make([]byte, 8), []byte(key), []byte(val))
			done <- err
		}()
		return done
	}
	answered := func(done <-chan error) bool {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("set: %v", err)
			}
			return true
		default:
			return false
		}
	}

	// 1. No stream copies vb 7 yet: the write waits, and is still
	// waiting once it counted its wait (there is nothing it could have
	// been answered on).
	const vb = 7
	a.setState(vb, vbucket.Active)
	key := keysFor("want", vb, 1)[0]
	done := write(vb, key, "v1")
	eventually(t, 10*time.Second, func() (bool, string) { return waits() >= 1, "the write did not wait" })
	if answered(done) {
		t.Fatal("a write was answered while no stream copied its vbucket, which the map gives a replica")
	}
	// The replica's stream opens: the write is answered, and the replica
	// has it.
	r.must(r.Replicate(vb, a.Addr), "REPLICATE")
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("set: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the write was not answered after the replica's stream opened")
	}
	if got, ok := r.getOp(protocol.OpGetReplica, vb, key); !ok || got != "v1" {
		t.Errorf("the replica has %q (%v) right after the answer, want v1", got, ok)
	}

	// 2. vb 9 waits the same way until a newer map gives it no replica.
	const vb2 = 9
	a.setState(vb2, vbucket.Active)
	before := waits()
	done = write(vb2, keysFor("want", vb2, 1)[0], "v2")
	eventually(t, 10*time.Second, func() (bool, string) { return waits() > before, "the write did not wait" })
	a.must(a.SetClusterConfig(mapJSON(2, -1), 0, 2), "SET_CLUSTER_CONFIG")
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("set: %v", err)
		}
	case <-time.After(15 * time.Second): // the wait itself lasts 20 s
		t.Fatal("the write still waited after the map stopped giving its vbucket a replica")
	}
	if n := a.stats("vbucket")["sync_replication_timeouts"]; n != "0" {
		t.Errorf("sync_replication_timeouts = %s, want 0", n)
	}
}

// TestSyncReplicationTimeoutIsNoAck: with --sync-replication, a write
// whose replication is not confirmed within --pending-timeout (the map
// gives its vbucket a replica, and no stream copies it) is answered with
// an error, binary SyncWriteAmbiguous and text SERVER_ERROR, never
// acknowledged: a failover could lose it. A quiet binary set gets the
// error too; a text set with noreply gets nothing.
func TestSyncReplicationTimeoutIsNoAck(t *testing.T) {
	nodes := startNodes(t, 2, "--sync-replication", "--pending-timeout", "300ms")
	a := dialCtl(t, nodes[0].Addr)
	rows := make([]string, numVBuckets)
	for i := range rows {
		rows[i] = "[0,1]"
	}
	a.must(a.SetClusterConfig(fmt.Appendf(nil, `{"rev":1,"name":"default","nodeLocator":"vbucket","vBucketServerMap":{"hashAlgorithm":"CRC","numReplicas":1,"serverList":[%q,%q],"vBucketMap":[%s]}}`,
		nodes[0].Addr, nodes[1].Addr, strings.Join(rows, ",")), 0, 1), "SET_CLUSTER_CONFIG")
	const vb = 3
	a.setState(vb, vbucket.Active)
	key := keysFor("ambiguous", vb, 1)[0]
	if _, err := a.Do(protocol.OpSet, vb, make([]byte, 8), []byte(key), []byte("v")); !admin.IsStatus(err, protocol.StatusSyncWriteAmbiguous) {
		t.Errorf("binary set with no stream to confirm it: %v, want status SyncWriteAmbiguous", err)
	}
	// The text protocol (a node without a vbucket in the request maps the
	// key itself: the text set lands in the key's vbucket, vb).
	nc, err := net.Dial("tcp", nodes[0].Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(nc, "set %s 0 0 1 noreply\r\nx\r\nset %s 0 0 1\r\ny\r\n", key, key)
	line, err := bufio.NewReader(nc).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "SERVER_ERROR sync replication timed out") {
		t.Errorf("text set with no stream to confirm it: %q, %v; want SERVER_ERROR sync replication timed out… (and nothing for the noreply set)", line, err)
	}
	if n, _ := strconv.Atoi(a.stats("vbucket")["sync_replication_timeouts"]); n != 3 {
		t.Errorf("sync_replication_timeouts = %d, want 3", n)
	}
}

// TestSyncReplicationReadsWaitForReplicas is issue 43's seventh hole:
// under --sync-replication a write that no replica has confirmed is
// answered "ambiguous" (it may not survive a failover), yet it was
// readable on the active at once, so a client could read a value that a
// failover then undid: not linearizable. Now a read waits until the write
// is replicated, at most --pending-timeout, and one whose wait runs out
// does not return the value: binary TMPFAIL, text and meta "SERVER_ERROR
// temporary failure" (refusals a proxy or a vbucket client sends again;
// a miss would say the key is absent). Once a replica's stream has the
// write, reads return it.
func TestSyncReplicationReadsWaitForReplicas(t *testing.T) {
	nodes := startNodes(t, 2, "--sync-replication", "--pending-timeout", "300ms")
	a := dialCtl(t, nodes[0].Addr)
	rows := make([]string, numVBuckets)
	for i := range rows {
		rows[i] = "[0,1]"
	}
	a.must(a.SetClusterConfig(fmt.Appendf(nil, `{"rev":1,"name":"default","nodeLocator":"vbucket","vBucketServerMap":{"hashAlgorithm":"CRC","numReplicas":1,"serverList":[%q,%q],"vBucketMap":[%s]}}`,
		nodes[0].Addr, nodes[1].Addr, strings.Join(rows, ",")), 0, 1), "SET_CLUSTER_CONFIG")
	const vb = 3
	a.setState(vb, vbucket.Active)
	keys := keysFor("unsure", vb, 2)
	if _, err := a.Do(protocol.OpSet, vb, make([]byte, 8), []byte(keys[0]), []byte("v0")); !admin.IsStatus(err, protocol.StatusSyncWriteAmbiguous) {
		t.Fatalf("binary set with no stream to confirm it: %v, want SyncWriteAmbiguous", err)
	}
	if v, err := a.Do(protocol.OpGet, vb, nil, []byte(keys[0]), nil); !admin.IsStatus(err, protocol.StatusTmpFail) {
		t.Errorf("binary get of a write no replica has: %q, %v; want TMPFAIL", v, err)
	}
	nc, err := net.Dial("tcp", nodes[0].Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	br := bufio.NewReader(nc)
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	read := func(req string, lines int) string {
		fmt.Fprint(nc, req)
		var out []string
		for range lines {
			line, err := br.ReadString('\n')
			if err != nil {
				t.Fatalf("%q: %v after %q", req, err, out)
			}
			out = append(out, strings.TrimSpace(line))
		}
		return strings.Join(out, "|")
	}
	if got := read("get "+keys[0]+" "+keys[1]+"\r\n", 1); got != "SERVER_ERROR temporary failure" {
		t.Errorf("text multi-get of an unconfirmed write and a missing key: %q, want SERVER_ERROR temporary failure", got)
	}
	if got := read("mg "+keys[0]+" v\r\n", 1); got != "SERVER_ERROR temporary failure" {
		t.Errorf("mg of an unconfirmed write: %q, want SERVER_ERROR temporary failure", got)
	}
	st := a.stats("vbucket")
	// The binary get, the multi-get's hit (a miss returns no value, so
	// it does not wait), the mg.
	if n, _ := strconv.Atoi(st["sync_replication_read_timeouts"]); n != 3 {
		t.Errorf("sync_replication_read_timeouts = %q, want 3", st["sync_replication_read_timeouts"])
	}
	// The replica's stream takes the write: reads return it.
	r := dialCtl(t, nodes[1].Addr)
	r.must(r.Replicate(vb, a.Addr), "REPLICATE")
	eventually(t, 10*time.Second, func() (bool, string) {
		v, err := a.Do(protocol.OpGet, vb, nil, []byte(keys[0]), nil)
		return err == nil && string(v) == "v0", fmt.Sprintf("get %q, %v", v, err)
	})
	if got := read("get "+keys[0]+"\r\n", 3); got != "VALUE "+keys[0]+" 0 2|v0|END" {
		t.Errorf("text get once replicated: %q", got)
	}
}

// TestSyncReplicationReadsWaitForTheirKey: under --sync-replication a text
// or meta read waits for its own key's last write, not for its vbucket's.
// It was the vbucket's: once a replica was gone, a write of one key made
// every key of its vbucket unreadable until the failover, values
// replicated long before included (a miss, which TestProxyClusterClients
// saw as a lost write), and a multi-get whose wait ran out dropped its
// first VALUE block, whichever key was unsure, so it returned the unsure
// value. Now a key replicated before the replica went is read, and a
// multi-get with a key written since fails as a whole, wherever the key
// stands.
func TestSyncReplicationReadsWaitForTheirKey(t *testing.T) {
	nodes := startNodes(t, 2, "--sync-replication", "--pending-timeout", "300ms")
	a := dialCtl(t, nodes[0].Addr)
	rows := make([]string, numVBuckets)
	for i := range rows {
		rows[i] = "[0,1]"
	}
	a.must(a.SetClusterConfig(fmt.Appendf(nil, `{"rev":1,"name":"default","nodeLocator":"vbucket","vBucketServerMap":{"hashAlgorithm":"CRC","numReplicas":1,"serverList":[%q,%q],"vBucketMap":[%s]}}`,
		nodes[0].Addr, nodes[1].Addr, strings.Join(rows, ",")), 0, 1), "SET_CLUSTER_CONFIG")
	const vb = 3
	a.setState(vb, vbucket.Active)
	r := dialCtl(t, nodes[1].Addr)
	r.must(r.Replicate(vb, a.Addr), "REPLICATE")
	keys := keysFor("perkey", vb, 2)
	eventually(t, 10*time.Second, func() (bool, string) {
		_, err := a.Do(protocol.OpSet, vb, make([]byte, 8), []byte(keys[0]), []byte("v0"))
		return err == nil, fmt.Sprintf("set with the replica's stream open: %v", err)
	})
	nodes[1].Signal(syscall.SIGKILL)
	if !nodes[1].WaitExit(10 * time.Second) {
		t.Fatal("the replica did not exit")
	}
	if _, err := a.Do(protocol.OpSet, vb, make([]byte, 8), []byte(keys[1]), []byte("v1")); !admin.IsStatus(err, protocol.StatusSyncWriteAmbiguous) {
		t.Fatalf("set with the replica gone: %v, want SyncWriteAmbiguous", err)
	}
	nc, err := net.Dial("tcp", nodes[0].Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	br := bufio.NewReader(nc)
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	read := func(req string, lines int) string {
		fmt.Fprint(nc, req)
		var out []string
		for range lines {
			line, err := br.ReadString('\n')
			if err != nil {
				t.Fatalf("%q: %v after %q", req, err, out)
			}
			out = append(out, strings.TrimSpace(line))
		}
		return strings.Join(out, "|")
	}
	if got, want := read("get "+keys[0]+"\r\n", 3), "VALUE "+keys[0]+" 0 2|v0|END"; got != want {
		t.Errorf("get of the replicated key: %q, want %q", got, want)
	}
	// A multi-get with the unsure key fails as a whole, wherever the key
	// stands (memcached's failed multi-get: the replies not sent yet
	// dropped, one error line).
	for _, req := range []string{"get " + keys[0] + " " + keys[1], "get " + keys[1] + " " + keys[0], "gets " + keys[1]} {
		if got := read(req+"\r\n", 1); got != "SERVER_ERROR temporary failure" {
			t.Errorf("%s (the first key replicated, the second written since the replica went): %q, want SERVER_ERROR temporary failure", req, got)
		}
	}
	if got, want := read("get "+keys[0]+" "+keys[0]+"\r\n", 5), "VALUE "+keys[0]+" 0 2|v0|VALUE "+keys[0]+" 0 2|v0|END"; got != want {
		t.Errorf("multi-get of the replicated key twice: %q, want %q", got, want)
	}
	if got := read("mg "+keys[0]+" v\r\n", 2); got != "VA 2|v0" {
		t.Errorf("mg of the replicated key: %q, want VA 2|v0", got)
	}
	if got := read("mg "+keys[1]+" v\r\n", 1); got != "SERVER_ERROR temporary failure" {
		t.Errorf("mg of the key written since: %q, want SERVER_ERROR temporary failure", got)
	}
	// Binary reads wait for their own key too (they waited for their
	// vbucket's last write: the replicated key was refused as well).
	if v, err := a.Do(protocol.OpGet, vb, nil, []byte(keys[0]), nil); err != nil || string(v) != "v0" {
		t.Errorf("binary get of the replicated key: %q, %v; want v0", v, err)
	}
	if _, err := a.Do(protocol.OpGet, vb, nil, []byte(keys[1]), nil); !admin.IsStatus(err, protocol.StatusTmpFail) {
		t.Errorf("binary get of the key written since: %v, want TMPFAIL", err)
	}
}

// TestSyncReplicationSkipsAFailedOverReplica is issue 43's paused replica
// under --sync-replication: A feeds the replicas R1 and R2 of a vbucket;
// R1 is paused (SIGSTOP), so its stream stays open and acknowledges
// nothing, and A's writes wait. The manager fails R1 over and pushes a
// map whose row is [A, R2]: the waiting write must be answered at once,
// with R2 holding it. Before, A went on waiting for R1's stream, which a
// paused node keeps open, and every write of the vbucket was answered
// "sync replication timed out" until R1 resumed (the two-replica scenario
// run synchronously: 90 of 90 writes over 90 s). The consumers name
// themselves as the map does (stream.OpenNamed), which is how A knows
// whose stream that is.
func TestSyncReplicationSkipsAFailedOverReplica(t *testing.T) {
	nodes := startNodes(t, 3, "--sync-replication", "--pending-timeout", "20s")
	a, r1, r2 := dialCtl(t, nodes[0].Addr), dialCtl(t, nodes[1].Addr), dialCtl(t, nodes[2].Addr)
	const vb = 5
	mapJSON := func(rev int, row string) []byte {
		rows := make([]string, numVBuckets)
		for i := range rows {
			rows[i] = "[0,-1,-1]"
		}
		rows[vb] = row
		return fmt.Appendf(nil, `{"rev":%d,"name":"default","nodeLocator":"vbucket","vBucketServerMap":{"hashAlgorithm":"CRC","numReplicas":2,"serverList":[%q,%q,%q],"vBucketMap":[%s]}}`,
			rev, nodes[0].Addr, nodes[1].Addr, nodes[2].Addr, strings.Join(rows, ","))
	}
	for _, c := range []*ctl{a, r1, r2} {
		c.must(c.SetClusterConfig(mapJSON(1, "[0,1,2]"), 0, 1), "SET_CLUSTER_CONFIG")
	}
	a.setState(vb, vbucket.Active)
	r1.must(r1.Replicate(vb, a.Addr), "REPLICATE")
	r2.must(r2.Replicate(vb, a.Addr), "REPLICATE")
	keys := keysFor("outsider", vb, 2)
	a.set(vb, keys[0], "before")
	// Both streams are open (a REPLICATE's stream opens in the
	// background: until R1's has, R2's alone confirms A's writes).
	for _, r := range []*ctl{r1, r2} {
		eventually(t, 10*time.Second, func() (bool, string) {
			got, ok := r.getOp(protocol.OpGetReplica, vb, keys[0])
			return ok && got == "before", r.Addr + " does not hold the first write"
		})
	}

	if err := nodes[1].Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer nodes[1].Signal(syscall.SIGCONT)
	c := dialCtl(t, nodes[0].Addr)
	done := make(chan error, 1)
	go func() { // owned by the test: it reads done before returning
		_, err := c.Do(protocol.OpSet, vb, make([]byte, 8), []byte(keys[1]), []byte("after"))
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("a write was answered (%v) while R1, in the row, was paused", err)
	case <-time.After(time.Second):
	}
	// R1 failed over: the row is [A, R2].
	a.must(a.SetClusterConfig(mapJSON(2, "[0,2,-1]"), 0, 2), "SET_CLUSTER_CONFIG")
	start := time.Now()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("set after R1 left the row: %v", err)
		}
		t.Logf("answered %v after the map without R1", time.Since(start).Round(time.Millisecond))
	case <-time.After(10 * time.Second): // the wait itself lasts 20 s
		t.Fatal("the write still waited for the paused R1 after the map stopped naming it")
	}
	if got, ok := r2.getOp(protocol.OpGetReplica, vb, keys[1]); !ok || got != "after" {
		t.Errorf("R2 has %q (%v) right after the answer, want after", got, ok)
	}
}
