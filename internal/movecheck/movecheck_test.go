package movecheck

import (
	"context"
	"strings"
	"testing"

	"github.com/vbcache/vbcache/internal/admin"
	"github.com/vbcache/vbcache/internal/server"
	"github.com/vbcache/vbcache/internal/server/servertest"
	"github.com/vbcache/vbcache/internal/vbucket"
)

const testVBuckets = 16

// startNode runs an in-process cluster-mode node on a real socket.
func startNode(t *testing.T) string {
	t.Helper()
	cfg := server.Config{Version: "test", VBuckets: testVBuckets}
	return servertest.Start(t, cfg)
}

func startCluster(t *testing.T, n int) []string {
	t.Helper()
	var nodes []string
	for range n {
		nodes = append(nodes, startNode(t))
	}
	ok, err := Init(context.Background(), nodes, testVBuckets, nil)
	if err != nil || !ok {
		t.Fatalf("Init: %v %v", ok, err)
	}
	// A second Init leaves the cluster alone.
	if ok, err := Init(context.Background(), nodes, testVBuckets, nil); err != nil || ok {
		t.Fatalf("second Init: %v %v", ok, err)
	}
	return nodes
}

func report(t *testing.T, rep *Report) string {
	t.Helper()
	var b strings.Builder
	if rep != nil {
		rep.WriteText(&b)
	}
	return b.String()
}

// TestRunCorrectMoves: three nodes, the vbucket goes round them with
// both movers; nothing is wrong.
func TestRunCorrectMoves(t *testing.T) {
	for _, mv := range []struct {
		name string
		f    MoveFunc
	}{{"managed", ManagedMove}, {"takeover", TakeoverMove}} {
		t.Run(mv.name, func(t *testing.T) {
			nodes := startCluster(t, 3)
			rep, err := Run(context.Background(), Config{Nodes: nodes, VBucket: 5, Moves: 6, Writers: 2, Readers: 1, Keys: 8, Move: mv.f})
			if err != nil {
				t.Fatalf("Run: %v\n%s", err, report(t, rep))
			}
			if !rep.OK() || rep.Moves != 6 || rep.MovesFailed != 0 || rep.Writes == 0 || rep.ReadBacks != 16 {
				t.Errorf("report:\n%s", report(t, rep))
			}
			// Six moves round three nodes end where they began.
			if rep.Owner != nodes[5%3] {
				t.Errorf("owner %s, want %s", rep.Owner, nodes[5%3])
			}
		})
	}
}

// forgetfulMove turns the target active without copying anything and the
// source dead, and publishes no map: every write acknowledged before it
// is gone, and no write can be acknowledged after it (clients keep being
// refused by the dead source), so the read-back must find every key lost.
func forgetfulMove(ctx context.Context, nodes []string, vb int, from, to string) error {
	for _, step := range []struct {
		addr string
		f    func(c *admin.Conn) error
	}{
		{to, func(c *admin.Conn) error { return c.DelVBucket(vb) }},
		{from, func(c *admin.Conn) error { return c.SetVBucket(vb, vbucket.Dead) }},
		{to, func(c *admin.Conn) error { return c.SetVBucket(vb, vbucket.Active) }},
	} {
		if _, err := withConn(ctx, step.addr, func(c *admin.Conn) (struct{}, error) { return struct{}{}, step.f(c) }); err != nil {
			return err
		}
	}
	return nil
}

// doubleMove makes the target active and leaves the source active too.
func doubleMove(ctx context.Context, nodes []string, vb int, from, to string) error {
	_, err := withConn(ctx, to, func(c *admin.Conn) (struct{}, error) { return struct{}{}, c.SetVBucket(vb, vbucket.Active) })
	return err
}

// TestRunCatchesBrokenMoves: the checker reports what a broken move does.
func TestRunCatchesBrokenMoves(t *testing.T) {
	t.Run("forgetful", func(t *testing.T) {
		nodes := startCluster(t, 2)
		rep, err := Run(context.Background(), Config{Nodes: nodes, VBucket: 3, Moves: 1, Writers: 2, Readers: 1, Keys: 8,
			Move: forgetfulMove})
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
		if rep.OK() || rep.Violations[LostWrite] != 16 {
			t.Errorf("want 16 lost writes (every key was acknowledged before the move):\n%s", report(t, rep))
		}
	})
	t.Run("two-actives", func(t *testing.T) {
		nodes := startCluster(t, 2)
		rep, err := Run(context.Background(), Config{Nodes: nodes, VBucket: 3, Moves: 1, Writers: 1, Readers: -1, Keys: 4,
			Move: doubleMove})
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
		if rep.Violations[FinalState] == 0 {
			t.Errorf("want a final-state violation (both nodes active):\n%s", report(t, rep))
		}
	})
}

func TestRunRefusesBadConfig(t *testing.T) {
	nodes := []string{startNode(t), startNode(t)}
	if _, err := Run(context.Background(), Config{Nodes: nodes, VBucket: 1}); err == nil || !strings.Contains(err.Error(), "no node has a cluster config") {
		t.Errorf("Run without a config: %v", err)
	}
	if _, err := Run(context.Background(), Config{Nodes: nodes[:1], VBucket: 1}); err == nil {
		t.Error("Run with one node: no error")
	}
	if _, err := Init(context.Background(), nodes, testVBuckets, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := Run(context.Background(), Config{Nodes: nodes, VBucket: testVBuckets}); err == nil || !strings.Contains(err.Error(), "out of range") {
		t.Errorf("Run with vbucket %d: %v", testVBuckets, err)
	}
}
