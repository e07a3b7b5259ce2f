// Package vbmap is the one definition of key→vbucket hashing and of the
// cluster config JSON (DESIGN.md §2).
//
// A key is placed in two steps. First it is hashed to a vbucket with the
// 15-bit CRC that libvbucket, libcouchbase and gocbcore share:
//
//	h  = (crc32.ChecksumIEEE(key) >> 16) & 0x7fff
//	vb = h % numVBuckets
//
// Then the vbucket's row of the map names its servers: row[0] is the
// active copy, row[1..] the replicas, -1 for none. The map travels as
// Couchbase's terse bucket config (the JSON that real SDKs parse), which
// Config mirrors field for field; Parse checks the rules libvbucket
// enforces (power-of-two vbucket count, rows of numReplicas+1 entries,
// indices inside serverList).
//
// The package imports nothing of the project; clients, nodes, the manager
// and the proxy all build on it.
package vbmap

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
)

// MaxReplicas is the most replicas a map may carry (libvbucket's
// MAX_REPLICAS).
const MaxReplicas = 4

// MaxVBuckets is the most vbuckets a map may have (libvbucket's
// MAX_VBUCKETS).
const MaxVBuckets = 65536

// Hash returns the 15-bit key hash: (crc32.ChecksumIEEE(key) >> 16) & 0x7fff.
// It is the same value Cache::Memcached, libmemcached's "crc" hash and
// twemproxy's crc32 compute.
func Hash(key []byte) uint32 {
	return (crc32.ChecksumIEEE(key) >> 16) & 0x7fff
}

// HashString is Hash for a string key; it does not allocate.
func HashString(key string) uint32 {
	return (crc32.Update(0, crc32.IEEETable, stringBytes(key)) >> 16) & 0x7fff
}

// VBucket returns the vbucket of key among n vbuckets (n > 0).
func VBucket(key []byte, n int) int {
	return int(Hash(key) % uint32(n))
}

// VBucketString is VBucket for a string key; it does not allocate.
func VBucketString(key string, n int) int {
	return int(HashString(key) % uint32(n))
}

// Config is Couchbase's terse bucket config. Fields the project does not
// use yet are kept so that a config survives a parse/marshal round trip
// with the fields SDKs need.
type Config struct {
	Rev                int64            `json:"rev"`
	RevEpoch           int64            `json:"revEpoch,omitempty"`
	Name               string           `json:"name,omitempty"`
	UUID               string           `json:"uuid,omitempty"`
	NodeLocator        string           `json:"nodeLocator,omitempty"`
	BucketCapabilities []string         `json:"bucketCapabilities,omitempty"`
	Nodes              []Node           `json:"nodes,omitempty"`
	NodesExt           []NodeExt        `json:"nodesExt,omitempty"`
	VBucketServerMap   VBucketServerMap `json:"vBucketServerMap"`
}

// Node is an entry of the legacy "nodes" list.
type Node struct {
	Hostname string    `json:"hostname"` // "host:mgmtport"
	Ports    NodePorts `json:"ports"`
}

// NodePorts are a legacy node's ports; Direct is the memcached port.
type NodePorts struct {
	Direct int `json:"direct"`
	Proxy  int `json:"proxy,omitempty"`
}

// NodeExt is an entry of "nodesExt". An empty Hostname means "the host the
// config came from".
type NodeExt struct {
	Hostname string         `json:"hostname,omitempty"`
	Services map[string]int `json:"services"` // "kv", "mgmt", ...
	ThisNode bool           `json:"thisNode,omitempty"`
}

// VBucketServerMap is the map proper.
type VBucketServerMap struct {
	HashAlgorithm     string   `json:"hashAlgorithm"` // always "CRC"
	NumReplicas       int      `json:"numReplicas"`
	ServerList        []string `json:"serverList"` // "host:port"
	VBucketMap        [][]int  `json:"vBucketMap"`
	VBucketMapForward [][]int  `json:"vBucketMapForward,omitempty"`
}

// ErrInvalid is wrapped by every error Parse and Validate return for a
// config that breaks a map rule.
var ErrInvalid = errors.New("vbmap: invalid config")

// Parse decodes a config and validates it. Like libvbucket it also accepts
// a bare vBucketServerMap object (a config without the envelope).
//
// It reads a config by hand where it can (rows.go), and with
// encoding/json where it cannot.
func Parse(data []byte) (*Config, error) {
	cfg := new(Config)
	if !parseConfig(data, cfg) {
		*cfg = Config{}
		if err := parseSlow(data, cfg); err != nil {
			return nil, err
		}
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return cfg, nil
}

// parseSlow is Parse's decoding by encoding/json.
func parseSlow(data []byte, cfg *Config) error {
	var probe struct {
		VBucketServerMap json.RawMessage `json:"vBucketServerMap"`
	}
	if err := json.Unmarshal(data, &probe); err != nil {
		return fmt.Errorf("vbmap: parse config: %w", err)
	}
	if probe.VBucketServerMap == nil {
		if err := json.Unmarshal(data, &cfg.VBucketServerMap); err != nil {
			return fmt.Errorf("vbmap: parse config: %w", err)
		}
	} else if err := json.Unmarshal(data, cfg); err != nil {
		return fmt.Errorf("vbmap: parse config: %w", err)
	}
	return nil
}

// Validate checks the rules libvbucket enforces.
func (c *Config) Validate() error {
	m := &c.VBucketServerMap
	if m.HashAlgorithm != "" && m.HashAlgorithm != "CRC" {
		return fmt.Errorf("%w: hashAlgorithm %q (only CRC)", ErrInvalid, m.HashAlgorithm)
	}
	if m.NumReplicas < 0 || m.NumReplicas > MaxReplicas {
		return fmt.Errorf("%w: numReplicas %d not in 0..%d", ErrInvalid, m.NumReplicas, MaxReplicas)
	}
	if len(m.ServerList) == 0 {
		return fmt.Errorf("%w: empty serverList", ErrInvalid)
	}
	n := len(m.VBucketMap)
	if n == 0 || n > MaxVBuckets || n&(n-1) != 0 {
		return fmt.Errorf("%w: %d vbuckets (want a power of two up to %d)", ErrInvalid, n, MaxVBuckets)
	}
	check := func(name string, rows [][]int) error {
		for vb, row := range rows {
			if len(row) != m.NumReplicas+1 {
				return fmt.Errorf("%w: %s[%d] has %d entries, want %d", ErrInvalid, name, vb, len(row), m.NumReplicas+1)
			}
			for _, s := range row {
				if s < -1 || s >= len(m.ServerList) {
					return fmt.Errorf("%w: %s[%d] names server %d of %d", ErrInvalid, name, vb, s, len(m.ServerList))
				}
			}
		}
		return nil
	}
	if err := check("vBucketMap", m.VBucketMap); err != nil {
		return err
	}
	if m.VBucketMapForward != nil {
		if len(m.VBucketMapForward) != n {
			return fmt.Errorf("%w: vBucketMapForward has %d rows, vBucketMap %d", ErrInvalid, len(m.VBucketMapForward), n)
		}
		if err := check("vBucketMapForward", m.VBucketMapForward); err != nil {
			return err
		}
	}
	return nil
}

// NumVBuckets returns the number of vbuckets.
func (c *Config) NumVBuckets() int { return len(c.VBucketServerMap.VBucketMap) }

// Active returns the index into ServerList of vb's active copy, or -1.
func (c *Config) Active(vb int) int { return c.VBucketServerMap.VBucketMap[vb][0] }

// Newer reports whether c is newer than old by (revEpoch, rev).
func (c *Config) Newer(old *Config) bool {
	if c.RevEpoch != old.RevEpoch {
		return c.RevEpoch > old.RevEpoch
	}
	return c.Rev > old.Rev
}

// Spread returns a map of n vbuckets over servers with no replicas, vbucket
// i on server i % len(servers): the map a fresh cluster starts from.
func Spread(servers []string, n int) *Config {
	rows := make([][]int, n)
	for i := range rows {
		rows[i] = []int{i % len(servers)}
	}
	return &Config{Rev: 1, RevEpoch: 1, NodeLocator: "vbucket", VBucketServerMap: VBucketServerMap{
		HashAlgorithm: "CRC", ServerList: append([]string(nil), servers...), VBucketMap: rows,
	}}
}
