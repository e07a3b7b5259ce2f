package memcache

import (
	"fmt"
	"net"
	"sync/atomic"

	"github.com/vbcache/vbcache/internal/vbmap"
)

// VBucket places a key in two steps: key → vbucket with the 15-bit CRC of
// DESIGN.md §2 ((crc32(key)>>16)&0x7fff % numVBuckets), then vbucket →
// server through the cluster map's vBucketMap (the row's first entry, the
// active copy). The map can be replaced at runtime with SetConfig; a
// config is only taken if it is newer by (revEpoch, rev) and keeps the
// number of vbuckets.
type VBucket struct {
	state atomic.Pointer[vbState]
}

type vbState struct {
	cfg   *vbmap.Config
	addrs []net.Addr // serverList as Addrs
}

// NewVBucket returns a selector with a map of n vbuckets spread over
// servers round robin (vbucket i on server i % len(servers)), the map a
// fresh cluster starts with. n must be a power of two.
func NewVBucket(servers []string, n int) (*VBucket, error) {
	if len(servers) == 0 {
		return nil, ErrNoServers
	}
	cfg := vbmap.Spread(servers, n)
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("memcache: %w", err)
	}
	v := new(VBucket)
	v.state.Store(newVBState(cfg))
	return v, nil
}

// NewVBucketFromJSON returns a selector over a cluster map in Couchbase's
// terse bucket config JSON (or a bare vBucketServerMap).
func NewVBucketFromJSON(config []byte) (*VBucket, error) {
	cfg, err := vbmap.Parse(config)
	if err != nil {
		return nil, fmt.Errorf("memcache: %w", err)
	}
	v := new(VBucket)
	v.state.Store(newVBState(cfg))
	return v, nil
}

func newVBState(cfg *vbmap.Config) *vbState {
	st := &vbState{cfg: cfg}
	for _, s := range cfg.VBucketServerMap.ServerList {
		st.addrs = append(st.addrs, NewAddr(s))
	}
	return st
}

// SetConfig replaces the map if config is newer than the current one. It
// reports whether it did.
func (v *VBucket) SetConfig(config []byte) (bool, error) {
	cfg, err := vbmap.Parse(config)
	if err != nil {
		return false, fmt.Errorf("memcache: %w", err)
	}
	for {
		old := v.state.Load()
		if !cfg.Newer(old.cfg) {
			return false, nil
		}
		if cfg.NumVBuckets() != old.cfg.NumVBuckets() {
			return false, fmt.Errorf("memcache: config changes the number of vbuckets from %d to %d", old.cfg.NumVBuckets(), cfg.NumVBuckets())
		}
		if v.state.CompareAndSwap(old, newVBState(cfg)) {
			return true, nil
		}
	}
}

// NumVBuckets returns the number of vbuckets of the map.
func (v *VBucket) NumVBuckets() int { return v.state.Load().cfg.NumVBuckets() }

// VBucketOf returns key's vbucket.
func (v *VBucket) VBucketOf(key string) int {
	return vbmap.VBucketString(key, v.state.Load().cfg.NumVBuckets())
}

// PickServer returns the active server of key's vbucket.
func (v *VBucket) PickServer(key string) (net.Addr, error) {
	st := v.state.Load()
	vb := vbmap.VBucketString(key, st.cfg.NumVBuckets())
	i := st.cfg.Active(vb)
	if i < 0 {
		return nil, ErrNoServers
	}
	return st.addrs[i], nil
}

// Each calls f for every server of the map.
func (v *VBucket) Each(f func(net.Addr) error) error {
	for _, a := range v.state.Load().addrs {
		if err := f(a); err != nil {
			return err
		}
	}
	return nil
}
