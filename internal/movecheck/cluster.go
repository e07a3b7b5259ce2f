package movecheck

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/vbcache/vbcache/internal/admin"
	"github.com/vbcache/vbcache/internal/move"
	"github.com/vbcache/vbcache/internal/protocol"
	"github.com/vbcache/vbcache/internal/vbmap"
	"github.com/vbcache/vbcache/internal/vbucket"
)

// newestConfig asks every node for its cluster config and returns the
// newest by (revEpoch, rev), or nil when no node has one. Nodes that
// cannot be reached are skipped unless none answers.
func newestConfig(ctx context.Context, nodes []string) (*vbmap.Config, error) {
	var best *vbmap.Config
	var lastErr error
	answered := 0
	for _, addr := range nodes {
		js, err := withConn(ctx, addr, func(c *admin.Conn) ([]byte, error) { return c.ClusterConfig() })
		if err != nil {
			lastErr = err
			continue
		}
		answered++
		if len(js) == 0 {
			continue
		}
		cfg, err := vbmap.Parse(js)
		if err != nil {
			return nil, fmt.Errorf("config from %s: %w", addr, err)
		}
		if best == nil || cfg.Newer(best) {
			best = cfg
		}
	}
	if answered == 0 {
		return nil, lastErr
	}
	return best, nil
}

// withConn runs f on a fresh control connection to addr.
func withConn[T any](ctx context.Context, addr string, f func(*admin.Conn) (T, error)) (T, error) {
	var zero T
	c, err := admin.DialWith(ctx, addr, credentials(ctx))
	if err != nil {
		return zero, err
	}
	defer c.Close()
	return f(c)
}

// publish pushes cfg to every node. A node that already holds a config
// at least as new is not an error.
func publish(ctx context.Context, nodes []string, cfg *vbmap.Config) error {
	js, err := json.Marshal(cfg)
	if err != nil {
		return err
	}
	var errs []error
	for _, addr := range nodes {
		_, err := withConn(ctx, addr, func(c *admin.Conn) (struct{}, error) {
			return struct{}{}, c.SetClusterConfig(js, cfg.RevEpoch, cfg.Rev)
		})
		if err != nil && !admin.IsStatus(err, protocol.StatusKeyExists) {
			errs = append(errs, fmt.Errorf("publish rev %d to %s: %w", cfg.Rev, addr, err))
		}
	}
	return errors.Join(errs...)
}

// withOwner returns a copy of cfg, one revision newer, in which vb's
// active copy is server (an index into ServerList). Replicas are kept.
func withOwner(cfg *vbmap.Config, vb, server int) *vbmap.Config {
	next := *cfg
	m := next.VBucketServerMap
	m.VBucketMap = make([][]int, len(cfg.VBucketServerMap.VBucketMap))
	for i, row := range cfg.VBucketServerMap.VBucketMap {
		m.VBucketMap[i] = append([]int(nil), row...)
	}
	m.VBucketMap[vb][0] = server
	m.VBucketMapForward = nil
	next.VBucketServerMap = m
	next.Rev++
	return &next
}

// serverIndex returns addr's index in cfg's ServerList, or -1.
func serverIndex(cfg *vbmap.Config, addr string) int {
	for i, s := range cfg.VBucketServerMap.ServerList {
		if s == addr {
			return i
		}
	}
	return -1
}

// stateOf asks addr for vb's state.
func stateOf(ctx context.Context, addr string, vb int) (vbucket.State, error) {
	return withConn(ctx, addr, func(c *admin.Conn) (vbucket.State, error) { return c.GetVBucket(vb) })
}

// Init gives a cluster that has no config its first one: vbuckets spread
// over nodes as vbmap.Spread does (vbucket i on nodes[i % len(nodes)]),
// each made active on its node, the map published at rev 1. It refuses
// when any node already holds a config (the cluster is someone else's),
// and reports false then.
func Init(ctx context.Context, nodes []string, numVBuckets int, cr *admin.Credentials) (bool, error) {
	ctx = withCredentials(ctx, cr)
	if len(nodes) == 0 {
		return false, errors.New("movecheck: no nodes")
	}
	cur, err := newestConfig(ctx, nodes)
	if err != nil {
		return false, err
	}
	if cur != nil {
		return false, nil
	}
	cfg := vbmap.Spread(nodes, numVBuckets)
	for i, addr := range nodes {
		_, err := withConn(ctx, addr, func(c *admin.Conn) (struct{}, error) {
			for vb := range numVBuckets {
				if cfg.Active(vb) != i {
					continue
				}
				if err := c.SetVBucket(vb, vbucket.Active); err != nil {
					return struct{}{}, fmt.Errorf("SET_VBUCKET %d active on %s: %w", vb, addr, err)
				}
			}
			return struct{}{}, nil
		})
		if err != nil {
			return false, err
		}
	}
	return true, publish(ctx, nodes, cfg)
}

// ManagedMove is the default move: internal/move's Move (TAKEOVER, the
// new map published at rev+1, the old copy deleted, and its recovery
// rules when the TAKEOVER fails), with nodes as further nodes to publish
// to.
func ManagedMove(ctx context.Context, nodes []string, vb int, from, to string) error {
	res, err := move.Move(ctx, vb, from, to, move.Options{Nodes: nodes, Credentials: credentials(ctx)})
	if err != nil {
		return fmt.Errorf("%s: %w", res.String(), err)
	}
	return nil
}

// TakeoverMove is the checker's own, minimal move (the one it used before
// internal/move existed; Config.Move selects it): TAKEOVER on the target, then the map with the
// target as owner (rev+1) on every node, then the old copy deleted on
// the source (DESIGN.md §3 steps 1-5). When the TAKEOVER fails it looks
// at both states: a target that is active (only the answer was lost) or
// left a replica with the source dead (the handover began and the source
// never heard back) is made the owner; a source still active keeps the
// vbucket and the error is returned.
func TakeoverMove(ctx context.Context, nodes []string, vb int, from, to string) error {
	terr := func() error {
		c, err := admin.DialWith(ctx, to, credentials(ctx))
		if err != nil {
			return err
		}
		defer c.Close()
		return c.Takeover(vb, from)
	}()
	if terr != nil {
		srcSt, serr := stateOf(ctx, from, vb)
		dstSt, derr := stateOf(ctx, to, vb)
		switch {
		case serr == nil && srcSt == vbucket.Active:
			return fmt.Errorf("takeover failed, source kept the vbucket: %w", terr)
		case derr == nil && dstSt == vbucket.Active:
			// Active on the target: publish below.
		case derr == nil && dstSt == vbucket.Replica && serr == nil && srcSt == vbucket.Dead:
			if _, err := withConn(ctx, to, func(c *admin.Conn) (struct{}, error) {
				return struct{}{}, c.SetVBucket(vb, vbucket.Active)
			}); err != nil {
				return fmt.Errorf("takeover failed (%v) and promoting the target failed: %w", terr, err)
			}
		default:
			return fmt.Errorf("takeover failed, states source %v (%v) target %v (%v): %w", srcSt, serr, dstSt, derr, terr)
		}
	}
	cfg, err := newestConfig(ctx, nodes)
	if err != nil {
		return err
	}
	if cfg == nil {
		return errors.New("no node has a cluster config")
	}
	idx := serverIndex(cfg, to)
	if idx < 0 {
		return fmt.Errorf("%s is not in the config's serverList %v", to, cfg.VBucketServerMap.ServerList)
	}
	if err := publish(ctx, nodes, withOwner(cfg, vb, idx)); err != nil {
		return err
	}
	_, err = withConn(ctx, from, func(c *admin.Conn) (struct{}, error) { return struct{}{}, c.DelVBucket(vb) })
	if err != nil {
		return fmt.Errorf("delete the old copy on %s: %w", from, err)
	}
	if terr != nil {
		return fmt.Errorf("takeover answered an error but the target owns the vbucket (recovered): %w", terr)
	}
	return nil
}

// The checker's control connections log in with Config.Credentials (Init:
// its cr). They reach the helpers and Config.Move through the context the
// checker hands them, so that a Move function's signature stays the
// move's own; nothing outside this package sets or reads the value.
type credentialsKey struct{}

func withCredentials(ctx context.Context, cr *admin.Credentials) context.Context {
	return context.WithValue(ctx, credentialsKey{}, cr)
}

// credentials is the login for the checker's control connections (nil:
// none, for nodes run with --insecure-cluster).
func credentials(ctx context.Context) *admin.Credentials {
	cr, _ := ctx.Value(credentialsKey{}).(*admin.Credentials)
	return cr
}
