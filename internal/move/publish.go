package move

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"

	"github.com/vbcache/vbcache/internal/admin"
	"github.com/vbcache/vbcache/internal/protocol"
	"github.com/vbcache/vbcache/internal/vbmap"
)

// defaultMgmtPort is advertised as a new node's services.mgmt when no
// existing entry shows one: Couchbase's conventional port. vbcache serves
// no HTTP, but gocbcore rejects a config without a mgmt endpoint.
const defaultMgmtPort = 8091

// publishAttempts bounds the rounds of read-newest, modify, push when
// another publisher's config wins a race (KEY_EEXISTS).
const publishAttempts = 3

// published is the result of publish.
type published struct {
	noConfig   bool
	rev, epoch int64
	stored     []string          // nodes that hold the new map (or an equivalent newer one)
	failed     map[string]string // the others, with the reason
	err        error             // a config that could not be modified
}

// publish reads the newest config among the nodes, points row vb's active
// at the target, bumps rev and pushes it (package comment, step 3).
func (m *mover) publish(ctx context.Context) published {
	var p published
	for attempt := 0; attempt < publishAttempts; attempt++ {
		raw, cfg := m.newestConfig(ctx)
		if cfg == nil {
			return published{noConfig: true}
		}
		next, ncfg, err := withActive(raw, m.vb, m.to)
		if err != nil {
			return published{err: err}
		}
		p = published{rev: ncfg.Rev, epoch: ncfg.RevEpoch, failed: map[string]string{}}
		conflict := false
		for _, addr := range m.publishTargets(ncfg) {
			err := m.withConn(ctx, addr, func(c *admin.Conn) error {
				err := c.SetClusterConfig(next, ncfg.RevEpoch, ncfg.Rev)
				if !admin.IsStatus(err, protocol.StatusKeyExists) {
					return err
				}
				// The node holds a config at least as new: fine if it
				// already says what ours says (an earlier round, or
				// another publisher of the same move).
				got, gerr := c.ClusterConfig()
				if gerr != nil {
					return gerr
				}
				if g, perr := vbmap.Parse(got); perr == nil && !ncfg.Newer(g) && activeIs(g, m.vb, m.to) {
					return nil
				}
				conflict = true
				return err
			})
			if err != nil {
				p.failed[addr] = err.Error()
			} else {
				p.stored = append(p.stored, addr)
			}
		}
		if !conflict {
			return p
		}
		m.opt.logf("publish: a newer map appeared (%v); again", p.failed)
	}
	p.err = errors.New("a newer map kept appearing")
	return p
}

// callerPublish is step 3 done by Options.Publish.
func (m *mover) callerPublish(ctx context.Context) published {
	rev, err := m.opt.Publish(ctx, m.vb, m.to)
	return published{rev: rev, err: err, failed: map[string]string{}}
}

// newestConfig returns the newest config by (revEpoch, rev) among the two
// ends, Options.Nodes and every serverList seen, or nil if none holds
// one.
func (m *mover) newestConfig(ctx context.Context) ([]byte, *vbmap.Config) {
	queue := uniq(append([]string{m.from, m.to}, m.opt.Nodes...))
	seen := map[string]bool{}
	var best []byte
	var bestCfg *vbmap.Config
	for len(queue) > 0 {
		addr := queue[0]
		queue = queue[1:]
		if seen[addr] {
			continue
		}
		seen[addr] = true
		var raw []byte
		err := m.withConn(ctx, addr, func(c *admin.Conn) error {
			var err error
			raw, err = c.ClusterConfig()
			return err
		})
		if err != nil || len(raw) == 0 {
			continue
		}
		cfg, err := vbmap.Parse(raw)
		if err != nil {
			m.opt.logf("config on %s does not parse: %v", addr, err)
			continue
		}
		if bestCfg == nil || cfg.Newer(bestCfg) {
			best, bestCfg = raw, cfg
		}
		queue = append(queue, cfg.VBucketServerMap.ServerList...)
	}
	return best, bestCfg
}

// publishTargets is every node of cfg's serverList, the two ends and
// Options.Nodes.
func (m *mover) publishTargets(cfg *vbmap.Config) []string {
	all := append([]string{m.to, m.from}, cfg.VBucketServerMap.ServerList...)
	return uniq(append(all, m.opt.Nodes...))
}

func uniq(list []string) []string {
	var out []string
	for _, s := range list {
		if s != "" && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// activeIs reports whether cfg names addr as vb's active.
func activeIs(cfg *vbmap.Config, vb int, addr string) bool {
	if vb >= cfg.NumVBuckets() {
		return false
	}
	a := cfg.Active(vb)
	return a >= 0 && cfg.VBucketServerMap.ServerList[a] == addr
}

// withActive returns raw with row vb's active set to addr (added to
// serverList, nodes and nodesExt if absent; removed from the row's
// replicas) and rev+1. Fields of raw that vbmap.Config does not model are
// kept.
func withActive(raw []byte, vb int, addr string) ([]byte, *vbmap.Config, error) {
	cfg, err := vbmap.Parse(raw)
	if err != nil {
		return nil, nil, err
	}
	if vb >= cfg.NumVBuckets() {
		return nil, nil, fmt.Errorf("move: vbucket %d not in a map of %d", vb, cfg.NumVBuckets())
	}
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, nil, fmt.Errorf("move: target %q: %w", addr, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return nil, nil, fmt.Errorf("move: target %q: bad port", addr)
	}
	m := &cfg.VBucketServerMap
	idx := slices.Index(m.ServerList, addr)
	if idx < 0 {
		m.ServerList = append(m.ServerList, addr)
		idx = len(m.ServerList) - 1
	}
	addNode(cfg, host, port)
	row := m.VBucketMap[vb]
	row[0] = idx
	for i := 1; i < len(row); i++ {
		if row[i] == idx {
			row[i] = -1
		}
	}
	cfg.Rev++
	out, err := json.Marshal(cfg)
	if err != nil {
		return nil, nil, err
	}
	// Keep the fields Config does not model: overlay ours on the original
	// object (unless the original is a bare vBucketServerMap, which Parse
	// also accepts; then ours, with its envelope, replaces it).
	var orig, ours map[string]json.RawMessage
	if json.Unmarshal(raw, &orig) == nil && orig["vBucketServerMap"] != nil && json.Unmarshal(out, &ours) == nil {
		var origMap, ourMap map[string]json.RawMessage
		if json.Unmarshal(orig["vBucketServerMap"], &origMap) == nil && json.Unmarshal(ours["vBucketServerMap"], &ourMap) == nil {
			for k, v := range ourMap {
				origMap[k] = v
			}
			if b, err := json.Marshal(origMap); err == nil {
				ours["vBucketServerMap"] = b
			}
		}
		for k, v := range ours {
			orig[k] = v
		}
		if out, err = json.Marshal(orig); err != nil {
			return nil, nil, err
		}
	}
	return out, cfg, nil
}

// addNode adds host:port to the legacy nodes list and to nodesExt when
// they are in use (non-empty) and do not list it yet. Its mgmt port is
// copied from the existing entries (gocbcore requires one).
func addNode(cfg *vbmap.Config, host string, port int) {
	mgmt := defaultMgmtPort
	for _, n := range cfg.NodesExt {
		if p := n.Services["mgmt"]; p != 0 {
			mgmt = p
			break
		}
	}
	if mgmt == defaultMgmtPort && len(cfg.NodesExt) == 0 {
		for _, n := range cfg.Nodes {
			if _, p, err := net.SplitHostPort(n.Hostname); err == nil {
				if v, err := strconv.Atoi(p); err == nil && v > 0 {
					mgmt = v
					break
				}
			}
		}
	}
	if len(cfg.Nodes) > 0 {
		found := false
		for _, n := range cfg.Nodes {
			if h, _, _ := net.SplitHostPort(n.Hostname); h == host && n.Ports.Direct == port {
				found = true
			}
		}
		if !found {
			cfg.Nodes = append(cfg.Nodes, vbmap.Node{Hostname: net.JoinHostPort(host, strconv.Itoa(mgmt)),
				Ports: vbmap.NodePorts{Direct: port}})
		}
	}
	if len(cfg.NodesExt) > 0 {
		found := false
		for _, n := range cfg.NodesExt {
			if n.Hostname == host && (n.Services["kv"] == port || n.Services["kvSSL"] == port) {
				found = true
			}
		}
		if !found {
			cfg.NodesExt = append(cfg.NodesExt, vbmap.NodeExt{Hostname: host, Services: newServices(cfg.NodesExt[0].Services, port, mgmt)})
		}
	}
}

// newServices is the services of a node added at port, named as the
// existing entry like has them: kvSSL and mgmtSSL where the cluster
// serves TLS, kv and mgmt otherwise.
func newServices(like map[string]int, port, mgmt int) map[string]int {
	kv, m := "kv", "mgmt"
	if _, ok := like["kvSSL"]; ok {
		if _, plain := like["kv"]; !plain {
			kv = "kvSSL"
		}
	}
	if p, ok := like["mgmtSSL"]; ok && like["mgmt"] == 0 {
		m, mgmt = "mgmtSSL", p
	}
	return map[string]int{kv: port, m: mgmt}
}
