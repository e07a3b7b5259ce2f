package move

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/vbcache/vbcache/internal/vbmap"
	"github.com/vbcache/vbcache/internal/vbucket"
)

// TestDecide pins the recovery rules of the package comment: one row per
// situation, with the action and the rule that applies.
func TestDecide(t *testing.T) {
	ok := func(st vbucket.State) view { return view{reach: reachOK, state: st} }
	streaming := func(v view) view { v.streaming = true; return v }
	restarted := func(v view) view { v.restarted = true; return v }
	holding := func(v view, items, high uint64) view { v.items, v.high = items, high; return v }
	lined := func(v view) view { v.uuid = 7; return v } // a lineage for the vbucket there
	refused := view{reach: reachRefused}
	silent := view{reach: reachNoReply}
	fenced := view{reach: reachFenced} // Promote: never asked, so never streaming or restarted
	const (
		A = vbucket.Active
		R = vbucket.Replica
		P = vbucket.Pending
		D = vbucket.Dead
	)
	for _, tc := range []struct {
		name string
		f, t view
		want action
		rule string
	}{
		{"target active, source dead", ok(D), ok(A), actMoved, "R1"},
		{"target active, source gone", refused, ok(A), actMoved, "R1"},
		{"target active, source silent", silent, ok(A), actMoved, "R1"},
		{"target active, source restarted empty", restarted(ok(D)), ok(A), actMoved, "R1"},
		{"two actives", ok(A), ok(A), actUnresolved, "both-active"},
		{"target pending", ok(D), ok(P), actWait, "R2"},
		{"target pending, source gone", refused, ok(P), actWait, "R2"},
		{"target still streaming", ok(A), streaming(ok(R)), actWait, "R2"},
		{"source still streaming, target silent", streaming(ok(D)), silent, actWait, "R2"},
		{"source active, target replica", ok(A), ok(R), actAborted, "R3"},
		{"source active, target dead", ok(A), ok(D), actAborted, "R3"},
		{"source active, target gone", ok(A), refused, actAborted, "R3"},
		{"source active, target silent", ok(A), silent, actAborted, "R3"},
		{"source dead, target gone", lined(ok(D)), refused, actReactivate, "R4"},
		{"source dead, target replica", lined(ok(D)), ok(R), actReactivate, "R4"},
		{"source dead, target dead", lined(ok(D)), ok(D), actReactivate, "R4"},
		{"source dead, target restarted", lined(ok(D)), restarted(ok(D)), actReactivate, "R4"},
		{"source dead, target silent", lined(ok(D)), silent, actWait, "R4-wait"},
		{"source gone, target replica", refused, ok(R), actPromote, "R5"},
		// Issue 43: a source restarted where Recover knows no pid holds
		// nothing; a target replica that holds items is promoted.
		{"source dead and empty, target replica with items", ok(D), holding(ok(R), 300, 300), actPromote, "R5"},
		{"source dead with items, target replica with items", lined(holding(ok(D), 300, 300)), holding(ok(R), 300, 300), actReactivate, "R4"},
		{"source dead, only its seqno left, target replica with items", lined(holding(ok(D), 0, 300)), holding(ok(R), 300, 300), actReactivate, "R4"},
		{"source dead, never written, target replica empty", lined(ok(D)), ok(R), actReactivate, "R4"},
		{"source dead, never written, target dead with items", lined(ok(D)), holding(ok(D), 300, 300), actReactivate, "R4"},
		// Issue 43: a dead source with no lineage for the vbucket holds
		// no history of it (a restarted process, or a copy deleted
		// behind the move's back): never set active again, empty, while
		// the vbucket's replicas may hold the data.
		{"source dead without history, target dead", ok(D), ok(D), actUnresolved, "source-without-history"},
		{"source dead without history, target gone", ok(D), refused, actUnresolved, "source-without-history"},
		{"source dead without history, target replica empty", ok(D), ok(R), actUnresolved, "source-without-history"},
		{"source dead without history, target dead with items", ok(D), holding(ok(D), 300, 300), actUnresolved, "source-without-history"},
		{"source dead with items but no history, target dead", holding(ok(D), 5, 5), ok(D), actUnresolved, "source-without-history"},
		{"source dead without history, target silent", ok(D), silent, actWait, "source-without-history-wait"},
		{"source restarted, target replica", restarted(ok(D)), ok(R), actPromote, "R5"},
		{"source restarted and active", restarted(ok(A)), ok(R), actUnresolved, "source-restarted-active"},
		{"source restarted and active, target active", restarted(ok(A)), ok(A), actUnresolved, "both-active"},
		{"source gone, target restarted replica", refused, restarted(ok(R)), actUnresolved, "source-and-copy-lost"},
		{"source gone, target dead", refused, ok(D), actUnresolved, "source-and-copy-lost"},
		{"both gone", refused, refused, actUnresolved, "source-and-copy-lost"},
		{"source gone, target silent", refused, silent, actWait, "R5-wait"},
		{"source silent, target replica", silent, ok(R), actWait, "source-silent"},
		{"source replica", ok(R), ok(R), actUnresolved, "unexpected-state"},
		// A fenced source (Promote, a failover's promotion): it counts as
		// lost, and it is never active, dead or streaming to the rules.
		{"source fenced, target replica", fenced, ok(R), actPromote, "R5"},
		{"source fenced, target active", fenced, ok(A), actMoved, "R1"},
		{"source fenced, target pending", fenced, ok(P), actWait, "R2"},
		{"source fenced, target streaming", fenced, streaming(ok(R)), actWait, "R2"},
		{"source fenced, target silent", fenced, silent, actWait, "R5-wait"},
		{"source fenced, target gone", fenced, refused, actUnresolved, "source-and-copy-lost"},
		{"source fenced, target dead", fenced, ok(D), actUnresolved, "source-and-copy-lost"},
		{"source fenced, target restarted replica", fenced, restarted(ok(R)), actUnresolved, "source-and-copy-lost"},
	} {
		a, rule := decide(tc.f, tc.t)
		if a != tc.want || rule != tc.rule {
			t.Errorf("%s: got action %d (%s), want %d (%s)", tc.name, a, rule, tc.want, tc.rule)
		}
	}
}

func TestStreamOpen(t *testing.T) {
	lines := [][2]string{
		{"log_ring_bytes", "0"},
		{"producer:127.0.0.1:5000:vb_12:type", "replication"},
		{"producer:127.0.0.1:5000:vb_3:type", "takeover"},
		{"consumer:127.0.0.1:4000:vb_5:type", "takeover"},
		{"consumer:127.0.0.1:4000:vb_5:seqno", "7"},
		{"consumer:127.0.0.1:4000:vb_6:type", "replication"},
		{"consumer:127.0.0.1:4000:vb_6:seqno", "9"},
	}
	for _, tc := range []struct {
		vb   int
		peer string
		want bool
	}{
		{3, "", true},                // a takeover producer
		{12, "", false},              // replication is not a move
		{1, "", false},               // vb_1 is not vb_12's prefix
		{5, "127.0.0.1:4000", true},  // a takeover's consumer fed from the source
		{6, "127.0.0.1:4000", false}, // replication from the source cannot turn the target active
		{5, "127.0.0.1:400", false},  // another source
		{5, "", false},               // consumers count only with a peer
		{2, "127.0.0.1:4000", false}, // another vbucket
	} {
		if got := streamOpen(lines, tc.vb, tc.peer); got != tc.want {
			t.Errorf("vb %d peer %q: %v", tc.vb, tc.peer, got)
		}
	}
}

// TestWithActive: the row's active becomes the target, which leaves the
// replicas; a new node joins serverList, nodes and nodesExt with the
// cluster's mgmt port; rev+1; unmodelled fields survive.
func TestWithActive(t *testing.T) {
	raw := []byte(`{"rev":4,"revEpoch":2,"name":"default","extra":{"x":1},
"nodes":[{"hostname":"h1:9000","ports":{"direct":1}}],
"nodesExt":[{"hostname":"h1","services":{"kv":1,"mgmt":9000}}],
"vBucketServerMap":{"hashAlgorithm":"CRC","numReplicas":2,"serverList":["h1:1","h2:2"],
"vBucketMap":[[0,1,-1],[1,0,-1]],"future":true}}`)
	out, cfg, err := withActive(raw, 0, "h2:2")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Rev != 5 || cfg.RevEpoch != 2 {
		t.Fatalf("rev %d epoch %d", cfg.Rev, cfg.RevEpoch)
	}
	got, err := vbmap.Parse(out)
	if err != nil {
		t.Fatal(err)
	}
	if r := got.VBucketServerMap.VBucketMap[0]; r[0] != 1 || r[1] != -1 || r[2] != -1 {
		t.Fatalf("row 0: %v", r)
	}
	// h2 was in serverList but in neither node list: it is added there.
	if len(got.NodesExt) != 2 || got.NodesExt[1].Services["mgmt"] != 9000 || got.NodesExt[1].Services["kv"] != 2 ||
		len(got.Nodes) != 2 || got.Nodes[1].Hostname != "h2:9000" {
		t.Fatalf("nodes %+v nodesExt %+v", got.Nodes, got.NodesExt)
	}
	var probe struct {
		Extra json.RawMessage `json:"extra"`
		Map   struct {
			Future bool `json:"future"`
		} `json:"vBucketServerMap"`
	}
	if err := json.Unmarshal(out, &probe); err != nil || string(probe.Extra) != `{"x":1}` || !probe.Map.Future {
		t.Fatalf("unmodelled fields: %s", out)
	}

	out, cfg, err = withActive(raw, 1, "h3:3")
	if err != nil {
		t.Fatal(err)
	}
	if sl := cfg.VBucketServerMap.ServerList; len(sl) != 3 || sl[2] != "h3:3" || cfg.VBucketServerMap.VBucketMap[1][0] != 2 {
		t.Fatalf("new server: %s", out)
	}
	if _, _, err := withActive(raw, 2, "h2:2"); err == nil {
		t.Fatal("vbucket outside the map accepted")
	}
}

// TestWithActiveTLS: in a config of a TLS cluster (nodesExt names kvSSL
// and mgmtSSL only), a new node joins with the same service names, and a
// node already listed by kvSSL is not listed twice.
func TestWithActiveTLS(t *testing.T) {
	raw := []byte(`{"rev":4,"name":"default",
"nodesExt":[{"hostname":"h1","services":{"kvSSL":1,"mgmtSSL":9443}}],
"vBucketServerMap":{"hashAlgorithm":"CRC","numReplicas":0,"serverList":["h1:1"],
"vBucketMap":[[0],[0]]}}`)
	out, _, err := withActive(raw, 0, "h2:2")
	if err != nil {
		t.Fatal(err)
	}
	out, _, err = withActive(out, 1, "h1:1")
	if err != nil {
		t.Fatal(err)
	}
	got, err := vbmap.Parse(out)
	if err != nil {
		t.Fatal(err)
	}
	want := []vbmap.NodeExt{
		{Hostname: "h1", Services: map[string]int{"kvSSL": 1, "mgmtSSL": 9443}},
		{Hostname: "h2", Services: map[string]int{"kvSSL": 2, "mgmtSSL": 9443}},
	}
	if !reflect.DeepEqual(got.NodesExt, want) {
		t.Fatalf("nodesExt %+v, want %+v", got.NodesExt, want)
	}
}
