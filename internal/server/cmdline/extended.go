package cmdline

import (
	"math"
	"strconv"
	"strings"
	"time"
)

// applyExtended reads -o's comma-separated key[=value] list, in order,
// like glibc's getsubopt loop in memcached: an empty item in the middle of
// the list is an illegal suboption, a trailing comma is not.
func (o *Options) applyExtended(list string) error {
	for list != "" {
		item, rest, _ := strings.Cut(list, ",")
		list = rest
		key, val, hasVal := strings.Cut(item, "=")
		if err := o.applySubopt(item, key, val, hasVal); err != nil {
			return err
		}
	}
	return nil
}

// applySubopt applies one -o item. The messages and their exit status
// (1) are memcached's.
func (o *Options) applySubopt(item, key, val string, hasVal bool) error {
	c := &o.Config
	s := &c.Store
	missing := func(format string) error {
		if hasVal {
			return nil
		}
		return fail(ExitFailure, format, key)
	}
	num := func() (int, error) {
		n, ok := parseInt(val)
		if !ok || n > math.MaxInt32 || n < math.MinInt32 {
			return 0, illegal("-o "+key, val, "an integer")
		}
		return int(n), nil
	}
	unsigned := func() (uint64, error) {
		n, err := strconv.ParseUint(strings.TrimSpace(val), 10, 32)
		if err != nil {
			return 0, fail(ExitFailure, "could not parse argument to %s", key)
		}
		return n, nil
	}
	float := func() (float64, error) {
		f, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			return 0, illegal("-o "+key, val, "a number")
		}
		return f, nil
	}

	switch key {
	case "maxconns_fast":
		c.MaxConnsFast = true
	case "no_maxconns_fast":
		c.MaxConnsFast = false
	case "hashpower":
		if err := missing("Missing numeric argument for %s"); err != nil {
			return err
		}
		n, err := num()
		if err != nil {
			return err
		}
		if n < 12 {
			return fail(ExitFailure, "Initial hashtable multiplier of %d is too low", n)
		}
		if n > 32 {
			return fail(ExitFailure, "Initial hashtable multiplier of %d is too high\n"+
				"Choose a value based on \"STAT hash_power_level\" from a running instance", n)
		}
		s.HashPower = n
	case "no_hashexpand":
		// vbcache's index grows per shard; nothing to switch off.
	case "slab_reassign":
		c.SlabReassign, s.NoSlabReassign = true, false
	case "no_slab_reassign":
		c.SlabReassign, s.NoSlabReassign = false, true
	case "slab_automove":
		if hasVal {
			n, err := num()
			if err != nil {
				return err
			}
			if n < 0 || n > 2 {
				return fail(ExitFailure, "slab_automove must be between 0 and 2")
			}
		}
	case "no_slab_automove":
	case "slab_automove_ratio":
		if err := missing("Missing %s argument"); err != nil {
			return err
		}
		f, err := float()
		if err != nil {
			return err
		}
		if f <= 0 || f > 1 {
			return fail(ExitFailure, "slab_automove_ratio must be > 0 and < 1")
		}
	case "slab_automove_window":
		if err := missing("Missing %s argument"); err != nil {
			return err
		}
		n, err := num()
		if err != nil {
			return err
		}
		if n < 3 {
			return fail(ExitFailure, "slab_automove_window must be > 2")
		}
	case "slab_automove_freeratio": // an extstore tuning; harmless
		if err := missing("Missing %s argument"); err != nil {
			return err
		}
		if _, err := float(); err != nil {
			return err
		}
	case "tail_repair_time":
		if err := missing("Missing numeric argument for %s"); err != nil {
			return err
		}
		n, err := num()
		if err != nil {
			return err
		}
		if n < 10 {
			return fail(ExitFailure, "Cannot set tail_repair_time to less than 10 seconds")
		}
	case "hash_algorithm":
		if err := missing("Missing %s argument"); err != nil {
			return err
		}
		switch val {
		case "jenkins", "murmur3", "xxh3":
			o.hashAlgo = val
		default:
			return fail(ExitFailure, "Unknown hash_algorithm option (jenkins, murmur3, xxh3)")
		}
	case "lru_crawler":
		c.LRUCrawler = true
	case "no_lru_crawler":
		c.LRUCrawler = false
	case "lru_crawler_sleep":
		if err := missing("Missing %s value"); err != nil {
			return err
		}
		n, err := num()
		if err != nil {
			return err
		}
		if n > 1000000 || n < 0 {
			return fail(ExitFailure, "LRU crawler sleep must be between 0 and 1 second")
		}
	case "lru_crawler_tocrawl":
		if err := missing("Missing %s value"); err != nil {
			return err
		}
		if _, err := strconv.ParseUint(strings.TrimSpace(val), 10, 32); err != nil {
			return fail(ExitFailure, "lru_crawler_tocrawl takes a numeric 32bit value")
		}
	case "lru_maintainer":
		o.lruMaintain, s.FlatLRU, c.NoLRUMaintainer = true, false, false
	case "no_lru_maintainer":
		o.lruMaintain, s.FlatLRU, c.NoLRUMaintainer = false, true, true
	case "hot_lru_pct", "warm_lru_pct":
		if err := missing("Missing %s argument"); err != nil {
			return err
		}
		n, err := num()
		if err != nil {
			return err
		}
		if n < 1 || n >= 80 {
			return fail(ExitFailure, "%s must be > 1 and < 80", key)
		}
		if key == "hot_lru_pct" {
			s.HotLRUPct = n
		} else {
			s.WarmLRUPct = n
		}
	case "hot_max_factor", "warm_max_factor":
		if err := missing("Missing %s argument"); err != nil {
			return err
		}
		f, err := float()
		if err != nil {
			return err
		}
		if f <= 0 {
			return fail(ExitFailure, "%s must be > 0", key)
		}
	case "temporary_ttl":
		if err := missing("Missing %s argument"); err != nil {
			return err
		}
		if _, err := num(); err != nil {
			return err
		}
		o.tempTTLSet = true
	case "idle_timeout":
		if err := missing("Missing numeric argument for %s"); err != nil {
			return err
		}
		n, err := num()
		if err != nil {
			return err
		}
		if n < 0 {
			return illegal("-o "+key, val, "a number of seconds")
		}
		c.IdleTimeout = time.Duration(n) * time.Second
	case "unauth_timeout":
		if err := missing("Missing numeric argument for %s"); err != nil {
			return err
		}
		n, err := num()
		if err != nil {
			return err
		}
		if n < 0 {
			return illegal("-o "+key, val, "a number of seconds")
		}
		c.UnauthTimeout = time.Duration(n) * time.Second
	case "max_conns_per_ip", "max_unauth_conns":
		if err := missing("Missing numeric argument for %s"); err != nil {
			return err
		}
		n, err := num()
		if err != nil {
			return err
		}
		if n < 0 {
			return illegal("-o "+key, val, "a number of connections")
		}
		if key == "max_conns_per_ip" {
			c.MaxConnsPerIP = n
		} else {
			c.MaxUnauthConns = n
		}
	case "watcher_logbuf_size", "worker_logbuf_size", "read_buf_mem_limit":
		if err := missing("Missing %s argument"); err != nil {
			return err
		}
		if _, err := unsigned(); err != nil {
			return err
		}
	case "resp_obj_mem_limit":
		o.Warnings = append(o.Warnings, "DEPRECATED: resp_obj_mem_limit no longer used. See read_buf_mem_limit,")
	case "slab_sizes":
		if err := missing("Missing %s argument"); err != nil {
			return err
		}
		v := val
		o.slabSizesRaw = &v
	case "slab_chunk_max":
		if err := missing("Missing %s argument"); err != nil {
			return err
		}
		n, ok := parseInt(val)
		if !ok || n > math.MaxInt32 || n < math.MinInt32 {
			return fail(ExitFailure, "could not parse argument to slab_chunk_max")
		}
		if n <= 0 {
			return fail(ExitFailure, "slab_chunk_max must be greater than 0")
		}
		// memcached 1.6.18's -h says kilobytes, but it reads bytes.
		s.SlabChunkMax, o.chunkMaxSet = int(n), true
	case "no_hugepages":
		s.NoHugePages = true
	case "no_chunked_items":
		s.SlabChunkMax = 1 << 20 // the slab page size
	case "track_sizes":
		c.TrackSizes = true
	case "modern", "inline_ascii_resp", "no_inline_ascii_resp",
		"drop_privileges", "no_drop_privileges", "relaxed_privileges":
		// modern is a no-op in memcached too; vbcache always answers
		// inline and has no seccomp sandbox to drop privileges into.
	case "no_modern":
		if !o.chunkMaxSet {
			s.SlabChunkMax = 1 << 20
		}
		c.SlabReassign, s.NoSlabReassign = false, true
		c.MaxConnsFast = false
		s.FlatLRU, o.lruMaintain, c.NoLRUMaintainer = true, false, true
		c.LRUCrawler = false
		o.hashAlgo = "jenkins"
	case "sock_cookie_id":
		// Linux SO_MARK for firewalls; accepted and ignored.
	default:
		if ok, err := o.applySSLSubopt(key, val, hasVal); ok {
			return err
		}
		switch {
		case strings.HasPrefix(key, "ext_"):
			return fail(ExitUsage, "vbcache: -o %s (extstore) is not supported", key)
		case strings.HasPrefix(key, "proxy_"):
			return fail(ExitUsage, "vbcache: -o %s (memcached's built-in proxy) is not supported", key)
		}
		return fail(ExitFailure, "Illegal suboption \"%s\"", item)
	}
	return nil
}
