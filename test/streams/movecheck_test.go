package streams

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/vbcache/vbcache/internal/movecheck"
	"github.com/vbcache/vbcache/test/nodeproc"
)

// TestMoveCheck runs the takeover checker against two node processes:
// 20 moves A → B → A … in about 8 s under load (500 moves over 5 minutes
// with -long). Every violation fails the test.
func TestMoveCheck(t *testing.T) {
	nodes := addrs(startNodes(t, 2))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	ok, err := movecheck.Init(ctx, nodes, numVBuckets, nodeproc.ClusterCredentials())
	if err != nil || !ok {
		t.Fatalf("Init: %v %v", ok, err)
	}
	cfg := movecheck.Config{Nodes: nodes, Credentials: nodeproc.ClusterCredentials(), VBucket: 9, Moves: 20, Duration: 8 * time.Second, Writers: 4, Readers: 2, Keys: 16}
	if long() {
		cfg.Moves, cfg.Duration = 500, 5*time.Minute
	}
	if testing.Verbose() {
		cfg.Log = os.Stderr
	}
	rep, err := movecheck.Run(ctx, cfg)
	var b strings.Builder
	if rep != nil {
		rep.WriteText(&b)
	}
	t.Logf("report:\n%s", b.String())
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if !rep.OK() {
		t.Errorf("violations found")
	}
	if rep.Moves != cfg.Moves {
		t.Errorf("%d of %d moves completed", rep.Moves, cfg.Moves)
	}
	if rep.Writes == 0 || rep.Reads == 0 || rep.Polls == 0 {
		t.Errorf("the load did nothing: %d writes, %d reads, %d polls", rep.Writes, rep.Reads, rep.Polls)
	}
}

// TestMoveCheckThreeNodesSmallRing: the vbucket goes round three nodes
// whose log rings are small (--stream-log-bytes=65536) under heavier
// writes, so takeover streams may outrun the ring and start over.
func TestMoveCheckThreeNodesSmallRing(t *testing.T) {
	nodes := addrs(startNodes(t, 3, "--stream-log-bytes=65536"))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if ok, err := movecheck.Init(ctx, nodes, numVBuckets, nodeproc.ClusterCredentials()); err != nil || !ok {
		t.Fatalf("Init: %v %v", ok, err)
	}
	cfg := movecheck.Config{Nodes: nodes, Credentials: nodeproc.ClusterCredentials(), VBucket: 30, Moves: 12, Duration: 4 * time.Second, Writers: 8, Readers: 2, Keys: 64, ValueSize: 1000}
	rep, err := movecheck.Run(ctx, cfg)
	var b strings.Builder
	if rep != nil {
		rep.WriteText(&b)
	}
	t.Logf("report:\n%s", b.String())
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if !rep.OK() || rep.Moves != cfg.Moves {
		t.Errorf("violations or failed moves")
	}
}
