package manager

import (
	"fmt"
	"maps"
	"slices"

	"github.com/vbcache/vbcache/internal/manager/mgrclient"
	"github.com/vbcache/vbcache/internal/vbmap"
)

// State is everything the manager knows about the cluster. It lives in
// etcd as one JSON document (the key Config.Prefix + "/state"), written
// only by the leader, in a transaction that checks both the leader's
// election key and the document's revision: a manager that lost the
// leadership cannot overwrite its successor's state.
type State struct {
	NumVBuckets int    `json:"numVBuckets"` // fixed for the cluster's life
	Replicas    int    `json:"replicas"`    // 0-3
	Chain       bool   `json:"chain"`       // chained replication (r2 from r1) instead of star
	UUID        string `json:"uuid"`
	Rev         int64  `json:"rev"`
	RevEpoch    int64  `json:"revEpoch"`

	// Servers is the map's server list; Map and Forward index it. A
	// server stays listed while it holds a vbucket.
	Servers []string   `json:"servers"`
	Map     vbmap.Rows `json:"map"` // vbmap.Rows: decoded by hand, fast
	// Forward is the rebalance's target map (vBucketMapForward), nil when
	// no rebalance runs.
	Forward vbmap.Rows `json:"forward,omitempty"`

	// Nodes are the members: servers that should hold vbuckets after the
	// next rebalance. Added nodes join here first; removed ones leave.
	Nodes []string `json:"nodes"`
	// FailedOver lists nodes taken out by a failover.
	FailedOver []string `json:"failedOver,omitempty"`

	Rebalance *Rebalance `json:"rebalance,omitempty"`

	// LeaseMs is the longest lease, in milliseconds, that a node may hold
	// from any leader of this cluster: every leader raises it to its own
	// --lease before it grants one, and lowers it to its own once no node
	// can hold a longer one (lease_record.go). Failovers wait by it.
	LeaseMs int64 `json:"leaseMs,omitempty"`

	// Intents are the promotions of failovers whose map is committed and
	// whose promotions are not known to be done (intent.go): committed
	// with the map, cleared once they are; a successor finishes them.
	Intents []FailoverIntent `json:"intents,omitempty"`
}

// FailoverIntent is a committed failover's promotions, as the new map
// (revision Rev) names them: the vbuckets whose active Node was (Changed;
// of which Lost had no replica and are activated empty, KeptOld are a
// swap's kept dead copy), and those that were moving into it (Into), to
// be made active again on their sources.
type FailoverIntent struct {
	Node     string `json:"node"`
	Rev      int64  `json:"rev"`
	RevEpoch int64  `json:"revEpoch"`
	Changed  []int  `json:"changed,omitempty"`
	Lost     []int  `json:"lost,omitempty"`
	KeptOld  []int  `json:"keptOld,omitempty"`
	Into     []int  `json:"into,omitempty"`
}

// Rebalance is a rebalance's progress, kept in the state so a new leader
// resumes it. It is also the rebalance's part of Status, so it is defined
// with the API's documents in mgrclient.
type Rebalance = mgrclient.Rebalance

// clone returns a deep copy.
func (s *State) clone() *State {
	c := *s
	c.Servers = slices.Clone(s.Servers)
	c.Map = cloneRows(s.Map)
	c.Forward = cloneRows(s.Forward)
	c.Nodes = slices.Clone(s.Nodes)
	c.FailedOver = slices.Clone(s.FailedOver)
	c.Intents = slices.Clone(s.Intents) // each intent's slices are never changed in place
	if s.Rebalance != nil {
		r := *s.Rebalance
		r.Target = slices.Clone(s.Rebalance.Target)
		r.Moving = maps.Clone(s.Rebalance.Moving)
		c.Rebalance = &r
	}
	return &c
}

func cloneRows(rows [][]int) [][]int {
	if rows == nil {
		return nil
	}
	out := make([][]int, len(rows))
	flat := make([]int, 0, len(rows)*4)
	for i, r := range rows {
		start := len(flat)
		flat = append(flat, r...)
		out[i] = flat[start:len(flat):len(flat)]
	}
	return out
}

// serverIndex returns addr's index in Servers, adding it if absent.
func (s *State) serverIndex(addr string) int {
	if i := slices.Index(s.Servers, addr); i >= 0 {
		return i
	}
	s.Servers = append(s.Servers, addr)
	return len(s.Servers) - 1
}

// server returns the address of index i, or "" for -1.
func (s *State) server(i int) string {
	if i < 0 || i >= len(s.Servers) {
		return ""
	}
	return s.Servers[i]
}

// compact drops servers that hold nothing and are not members, renumbering
// the map.
func (s *State) compact() {
	used := make([]bool, len(s.Servers))
	for _, rows := range [][][]int{s.Map, s.Forward} {
		for _, row := range rows {
			for _, i := range row {
				if i >= 0 {
					used[i] = true
				}
			}
		}
	}
	for i, a := range s.Servers {
		if slices.Contains(s.Nodes, a) {
			used[i] = true
		}
	}
	renum := make([]int, len(s.Servers))
	var servers []string
	for i, a := range s.Servers {
		if used[i] {
			renum[i] = len(servers)
			servers = append(servers, a)
		} else {
			renum[i] = -1
		}
	}
	for _, rows := range [][][]int{s.Map, s.Forward} {
		for _, row := range rows {
			for j, i := range row {
				if i >= 0 {
					row[j] = renum[i]
				}
			}
		}
	}
	s.Servers = servers
}

// rowServers returns the addresses of a row ("" for -1).
func (s *State) rowServers(row []int) []string {
	out := make([]string, len(row))
	for i, x := range row {
		out[i] = s.server(x)
	}
	return out
}

// Services says which ports a config advertises for every node, in
// Couchbase's nodesExt service names.
type Services struct {
	Mgmt    int  // the manager API's port (Couchbase's SDKs require one)
	MgmtTLS bool // the API is HTTPS: "mgmtSSL" rather than "mgmt"
	KVTLS   bool // nodes serve only TLS (-Z): "kvSSL" rather than "kv"
}

// of is one node's services entry, its memcached port being port.
func (sv Services) of(port int) map[string]int {
	kv, mgmt := "kv", "mgmt"
	if sv.KVTLS {
		kv = "kvSSL"
	}
	if sv.MgmtTLS {
		mgmt = "mgmtSSL"
	}
	return map[string]int{kv: port, mgmt: sv.Mgmt}
}

// Config renders the state as the terse bucket config nodes and clients
// use (DESIGN.md §2), every node's services as sv says.
func (s *State) Config(sv Services) *vbmap.Config {
	mgmtPort := sv.Mgmt
	cfg := &vbmap.Config{
		Rev: s.Rev, RevEpoch: s.RevEpoch, Name: "default", UUID: s.UUID, NodeLocator: "vbucket",
		BucketCapabilities: []string{"cccp"},
		VBucketServerMap: vbmap.VBucketServerMap{
			HashAlgorithm: "CRC", NumReplicas: s.Replicas,
			ServerList: append([]string{}, s.Servers...),
		},
	}
	cfg.VBucketServerMap.VBucketMap = cloneRows(s.Map)
	if s.Forward != nil {
		cfg.VBucketServerMap.VBucketMapForward = cloneRows(s.Forward)
	}
	for _, a := range s.Servers {
		host, port := splitHostPort(a)
		cfg.Nodes = append(cfg.Nodes, vbmap.Node{Hostname: fmt.Sprintf("%s:%d", host, mgmtPort), Ports: vbmap.NodePorts{Direct: port}})
		cfg.NodesExt = append(cfg.NodesExt, vbmap.NodeExt{Hostname: host, Services: sv.of(port)})
	}
	return cfg
}

// newState is a cluster with no node yet: every vbucket unassigned.
func newState(numVBuckets, replicas int, chain bool, uuid string) *State {
	m := make([][]int, numVBuckets)
	for i := range m {
		m[i] = make([]int, replicas+1)
		for j := range m[i] {
			m[i][j] = -1
		}
	}
	return &State{NumVBuckets: numVBuckets, Replicas: replicas, Chain: chain, UUID: uuid, Rev: 1, RevEpoch: 1, Map: m}
}
