package manager

import (
	"context"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/vbcache/vbcache/internal/admin"
	"github.com/vbcache/vbcache/internal/protocol"
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

// TestConnEndedByItsContextIsNotPooled: a request whose context ends
// while it is in flight has its connection closed by conn's AfterFunc;
// that connection is not pooled, whatever fn returned. It was when fn
// returned a node's answer: a closed connection went back to the pool and
// c was set to nil while the AfterFunc's goroutine, started but not yet
// run, was about to close it (a leader's process died of the nil Close in
// TestScheduleAsync's cut-manager-etcd).
func TestConnEndedByItsContextIsNotPooled(t *testing.T) {
	n := startNode(t, "")
	m := &Manager{pool: connPool{idle: map[string][]*admin.Conn{}}}
	m.logins.Store(&logins{})
	for i := range 100 {
		ctx, cancel := context.WithCancel(context.Background())
		err := m.conn(ctx, n.addr, func(c *admin.Conn) error {
			_, err := c.Stats("")
			cancel() // the leadership ends as the node answers
			if err != nil {
				return err
			}
			return &admin.StatusError{Status: protocol.StatusKeyExists}
		})
		if err == nil {
			t.Fatalf("request %d: no error", i)
		}
		if got := len(m.pool.idle[n.addr]); got != 0 {
			t.Fatalf("request %d (%v): %d connections pooled, want none (conn closed each when its context ended)", i, err, got)
		}
	}
}
