// Package servertest runs vbcache nodes in process for tests, as
// net/http/httptest runs HTTP servers: on a loopback port of the
// system's choosing, stopped when the test ends.
package servertest

import (
	"context"
	"testing"

	"github.com/vbcache/vbcache/internal/server"
)

// Start runs a node with cfg on 127.0.0.1 (its Port, PortSet and Listen
// are set here, and InsecureCluster for a cluster node without
// ClusterAuth) and returns its address. The node's Serve goroutine is
// owned by the test: it ends at tb's cleanup, and an error from Serve
// fails the test.
func Start(tb testing.TB, cfg server.Config) string {
	tb.Helper()
	cfg.Port, cfg.PortSet, cfg.Listen = -1, true, []string{"127.0.0.1"}
	if cfg.VBuckets > 0 && cfg.ClusterAuth == nil {
		// A cluster node without a login to require serves control
		// requests from anyone, as with --insecure-cluster: the tests
		// that run nodes here drive them with unauthenticated admin
		// connections. Set cfg.ClusterAuth to test the login.
		cfg.InsecureCluster = true
	}
	s, err := server.New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	if err := s.Listen(); err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	tb.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			tb.Errorf("Serve: %v", err)
		}
	})
	return s.Addrs()[0].String()
}
