package manager

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/vbcache/vbcache/internal/admin"
)

// The console's per-node figures: requests per second and replication
// lag. Only a node has them, so while a console watches (a client of GET
// /ui/events is connected) the manager samples every node each
// sampleInterval: its general stats (the request counters memcached keeps)
// and "stats streams" (each producer stream's lag). Nobody watching, no
// sampling. A node that does not answer within the sample's timeout holds
// up only its own sample; its figures go stale and then absent.

const (
	sampleInterval = time.Second
	sampleTimeout  = 2 * time.Second
	sampleStale    = 5 * time.Second // older samples are not shown
)

// nodeSample is what the last two samples of a node said.
type nodeSample struct {
	at        time.Time
	ops       uint64  // the request counters' sum at at
	opsPerSec float64 // between the last two samples
	rate      bool    // opsPerSec is known (two samples)
	lagSeqnos uint64  // over the node's producer streams: mutations not acknowledged
	lagBytes  uint64  // and their bytes (a lower bound where the log no longer holds them)
	busy      bool    // a sample is in flight
}

// opsStats are the general stats counted as requests: memcached's
// counters of every command that reads or writes an item.
var opsStats = map[string]bool{"cmd_get": true, "cmd_set": true, "cmd_touch": true, "delete_hits": true, "delete_misses": true,
	"incr_hits": true, "incr_misses": true, "decr_hits": true, "decr_misses": true}

// sampleLoop samples the nodes while a console watches, until ctx ends;
// its samplers are its own and it waits for them.
func (m *Manager) sampleLoop(ctx context.Context) {
	t := time.NewTicker(sampleInterval)
	defer t.Stop()
	var samplers sync.WaitGroup
	defer samplers.Wait()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s := m.State()
		m.mu.Lock()
		watched := m.consoles > 0
		var todo []string
		if watched {
			for _, a := range append(append([]string{}, s.Servers...), s.Nodes...) {
				x := m.samples[a]
				if x == nil {
					x = &nodeSample{}
					m.samples[a] = x
				}
				if !x.busy {
					x.busy = true
					todo = append(todo, a)
				}
			}
		}
		m.mu.Unlock()
		for _, a := range todo {
			samplers.Add(1)
			go func() { // owned by sampleLoop, which waits for it
				defer samplers.Done()
				m.sample(ctx, a)
			}()
		}
	}
}

// sample reads addr's stats and records them.
func (m *Manager) sample(ctx context.Context, addr string) {
	ctx, cancel := context.WithTimeout(ctx, sampleTimeout)
	defer cancel()
	var ops, lagSeqnos, lagBytes uint64
	err := m.connIn(m.sampleConns, ctx, addr, func(c *admin.Conn) error {
		c.Timeout = sampleTimeout
		general, err := c.Stats("")
		if err != nil {
			return err
		}
		for _, kv := range general {
			if opsStats[kv[0]] {
				n, _ := strconv.ParseUint(kv[1], 10, 64)
				ops += n
			}
		}
		streams, err := c.Stats("streams")
		if err != nil {
			return err
		}
		for _, kv := range streams {
			if !strings.HasPrefix(kv[0], "producer:") {
				continue
			}
			v := strings.TrimPrefix(kv[1], ">")
			switch {
			case strings.HasSuffix(kv[0], ":seqno_behind"):
				n, _ := strconv.ParseUint(v, 10, 64)
				lagSeqnos += n
			case strings.HasSuffix(kv[0], ":bytes_behind"):
				n, _ := strconv.ParseUint(v, 10, 64)
				lagBytes += n
			}
		}
		return nil
	})
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	x := m.samples[addr]
	if x == nil { // cannot happen: sampleLoop made it; but never panic for a figure
		x = &nodeSample{}
		m.samples[addr] = x
	}
	x.busy = false
	if err != nil {
		x.rate = false
		return
	}
	if !x.at.IsZero() && now.Sub(x.at) < sampleStale && ops >= x.ops {
		x.opsPerSec, x.rate = float64(ops-x.ops)/now.Sub(x.at).Seconds(), true
	} else {
		x.rate = false
	}
	x.at, x.ops, x.lagSeqnos, x.lagBytes = now, ops, lagSeqnos, lagBytes
}

// sampled fills ns's sampled figures if they are fresh. m.mu is held.
func (m *Manager) sampled(ns *NodeStatus) {
	x := m.samples[ns.Addr]
	if x == nil || x.at.IsZero() || time.Since(x.at) > sampleStale {
		return
	}
	if x.rate {
		v := x.opsPerSec
		ns.OpsPerSec = &v
	}
	s, b := x.lagSeqnos, x.lagBytes
	ns.LagSeqnos, ns.LagBytes = &s, &b
}
