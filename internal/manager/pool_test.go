package manager

import (
	"context"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/vbcache/vbcache/internal/admin"
	"github.com/vbcache/vbcache/internal/server"
)

// TestPoolAfterNodeRestart: connections pooled before a node restarted at
// the same address are not reused, so the first requests after the
// restart (config pushes, in TestSchedule's kill-node) are answered
// instead of failing one after another on the closed connections.
func TestPoolAfterNodeRestart(t *testing.T) {
	n := startNode(t, "")
	_, port, err := net.SplitHostPort(n.addr)
	if err != nil {
		t.Fatal(err)
	}
	m := &Manager{pool: connPool{idle: map[string][]*admin.Conn{}}}
	m.logins.Store(&logins{})
	ctx := context.Background()
	stats := func(c *admin.Conn) error { _, err := c.Stats(""); return err }

	// Fill the pool: maxIdleConns requests at once, each on its own
	// connection, all given back.
	var wg sync.WaitGroup
	var hold sync.WaitGroup
	hold.Add(maxIdleConns)
	for range maxIdleConns {
		wg.Go(func() {
			err := m.conn(ctx, n.addr, func(c *admin.Conn) error {
				hold.Done()
				hold.Wait() // every request is in flight at once
				return stats(c)
			})
			if err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if got := len(m.pool.idle[n.addr]); got != maxIdleConns {
		t.Fatalf("%d idle connections pooled, want %d", got, maxIdleConns)
	}
	for _, c := range m.pool.idle[n.addr] {
		if !c.Idle() {
			t.Fatal("a pooled connection to a running node is not idle")
		}
	}

	n.stop()
	pn, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	startNodeWith(t, "", func(cfg *server.Config) { cfg.Port = pn })
	waitFor(t, 5*time.Second, "the pooled connections to be seen closed", func() bool {
		for _, c := range m.pool.idle[n.addr] {
			if c.Idle() {
				return false
			}
		}
		return true
	})
	for i := range maxIdleConns + 1 {
		if err := m.conn(ctx, n.addr, stats); err != nil {
			t.Fatalf("request %d after the restart: %v", i+1, err)
		}
	}
	if got := len(m.pool.idle[n.addr]); got != 1 {
		t.Errorf("%d idle connections after sequential requests, want 1", got)
	}
}
