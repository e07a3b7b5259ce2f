package server

import (
	"fmt"
	"net"
	"os"
	"runtime"
	"sort"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/vbcache/vbcache/internal/protocol"
	"github.com/vbcache/vbcache/internal/store"
)

// This file serves the rarely used admin commands: stats and its
// subcommands, lru_crawler, slabs, lru and watch. None of it is on the
// request path, so it favours clarity over allocation-free code.

// tunables are the settings that admin commands change at run time.
type tunables struct {
	// mu protects every field. settingsStats holds it while it reads the
	// store's class stats (the store's locks, which never lead back here);
	// nothing under it touches a socket: replies go to c.out.
	mu              sync.Mutex
	slabAutomove    int
	automoveRatio   float64
	automoveWindow  int
	hotPct, warmPct int
	hotFactor       float64
	warmFactor      float64
	segmented       bool
	tempLRU         bool
	tempTTL         int
	crawlerSleep    int
	crawlerToCrawl  int
}

func (c *conn) statLine(name string, value string) {
	if c.binStat {
		c.appendStatPacket(name, value)
		return
	}
	c.out = append(c.out, "STAT "...)
	c.out = append(c.out, name...)
	c.out = append(c.out, ' ')
	c.out = append(c.out, value...)
	c.out = append(c.out, '\r', '\n')
}

func (c *conn) statUint(name string, v uint64) {
	c.statLine(name, strconv.FormatUint(v, 10))
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// statVBArg is the optional vbucket number after "stats vbucket" or
// "stats streams" (-1: all).
func statVBArg(t *protocol.Tokens) int {
	if t.N >= 4 {
		if n, err := strconv.Atoi(string(t.T[2])); err == nil && n >= 0 {
			return n
		}
	}
	return -1
}

// stats is memcached's process_stat.
func (c *conn) stats() {
	t := &c.req.Tokens
	s := c.s
	if t.N == 2 {
		c.generalStats()
		c.out = append(c.out, "END\r\n"...)
		return
	}
	sub := string(t.T[1])
	switch sub {
	case "reset":
		s.resetStats()
		c.reply("RESET")
	case "detail":
		arg := ""
		if t.N >= 4 {
			arg = string(t.T[2])
		}
		switch arg {
		case "on":
			s.detailEnabled.Store(true)
			c.reply("OK")
		case "off":
			s.detailEnabled.Store(false)
			c.reply("OK")
		case "dump":
			c.out = s.detail.dump(c.out)
			c.out = append(c.out, "END\r\n"...)
		default:
			c.reply("CLIENT_ERROR usage: stats detail on|off|dump")
		}
	case "settings":
		c.settingsStats()
		c.out = append(c.out, "END\r\n"...)
	case "cachedump":
		if s.cfg.DisableDumps {
			c.reply("CLIENT_ERROR stats cachedump not allowed")
			return
		}
		if t.N < 5 {
			c.reply("CLIENT_ERROR bad command line")
			return
		}
		id, ok1 := protocol.ParseUint32(t.T[2])
		limit, ok2 := protocol.ParseUint32(t.T[3])
		if !ok1 || !ok2 {
			c.reply("CLIENT_ERROR bad command line format")
			return
		}
		if id >= maxClasses {
			c.reply("CLIENT_ERROR Illegal slab id")
			return
		}
		s.store.CacheDump(int(id), int(limit), func(it *store.DumpItem) {
			exp := int64(0)
			if it.Exptime >= 0 {
				exp = it.Exptime
			}
			c.out = fmt.Appendf(c.out, "ITEM %s [%d b; %d s]\r\n", it.Key, it.Nbytes, exp)
		})
		c.out = append(c.out, "END\r\n"...)
	case "conns":
		c.connStats()
		c.out = append(c.out, "END\r\n"...)
	case "items":
		c.itemStats()
		c.out = append(c.out, "END\r\n"...)
	case "slabs":
		c.slabStats()
		c.out = append(c.out, "END\r\n"...)
	case "vbucket":
		if c.s.cl == nil {
			c.reply("ERROR")
			return
		}
		c.vbucketStats(statVBArg(t))
		c.out = append(c.out, "END\r\n"...)
	case "streams":
		if c.s.cl == nil {
			c.reply("ERROR")
			return
		}
		c.streamStats(statVBArg(t))
		c.out = append(c.out, "END\r\n"...)
	case "extstore":
		// Debian's memcached is built with extstore and prints no extstore
		// stats when none is configured; neither do we.
		c.out = append(c.out, "END\r\n"...)
	case "sizes":
		c.statLine("sizes_status", "disabled")
		c.out = append(c.out, "END\r\n"...)
	default:
		c.reply("ERROR")
	}
}

func (c *conn) generalStats() {
	s := c.s
	var tot totals
	s.sumCounters(&tot)
	var st store.Stats
	s.store.ReadStats(&st)
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	now := time.Now()
	c.statUint("pid", uint64(os.Getpid()))
	c.statUint("uptime", uint64(now.Sub(s.started)/time.Second))
	c.statUint("time", uint64(now.Unix()))
	c.statLine("version", s.cfg.Version)
	c.statLine("libevent", runtime.Version())
	c.statUint("pointer_size", 64)
	c.statLine("rusage_user", fmt.Sprintf("%d.%06d", ru.Utime.Sec, ru.Utime.Usec))
	c.statLine("rusage_system", fmt.Sprintf("%d.%06d", ru.Stime.Sec, ru.Stime.Usec))
	c.statUint("max_connections", uint64(s.cfg.MaxConns))
	curr := uint64(s.currConns.Load())
	c.statUint("curr_connections", curr)
	c.statUint("total_connections", s.totalConns.Load())
	if s.cfg.MaxConnsFast {
		c.statUint("rejected_connections", s.rejectedConns.Load())
	}
	c.statUint("connection_structures", s.connStructures.Load())
	c.statUint("response_obj_oom", 0)
	c.statUint("response_obj_count", curr)
	c.statUint("response_obj_bytes", curr*readBufSize)
	c.statUint("read_buf_count", curr)
	c.statUint("read_buf_bytes", curr*readBufSize)
	c.statUint("read_buf_bytes_free", 0)
	c.statUint("read_buf_oom", 0)
	c.statUint("reserved_fds", reservedFDs)
	c.statUint("cmd_get", tot.cmdGet)
	c.statUint("cmd_set", tot.cmdSet)
	c.statUint("cmd_flush", tot.cmdFlush)
	c.statUint("cmd_touch", tot.cmdTouch)
	c.statUint("cmd_meta", tot.cmdMeta)
	c.statUint("get_hits", tot.getHits)
	c.statUint("get_misses", tot.getMisses)
	c.statUint("get_expired", tot.getExpired)
	c.statUint("get_flushed", tot.getFlushed)
	c.statUint("delete_misses", tot.deleteMisses)
	c.statUint("delete_hits", tot.deleteHits)
	c.statUint("incr_misses", tot.incrMisses)
	c.statUint("incr_hits", tot.incrHits)
	c.statUint("decr_misses", tot.decrMisses)
	c.statUint("decr_hits", tot.decrHits)
	c.statUint("cas_misses", tot.casMisses)
	c.statUint("cas_hits", tot.casHits)
	c.statUint("cas_badval", tot.casBadval)
	c.statUint("touch_hits", tot.touchHits)
	c.statUint("touch_misses", tot.touchMisses)
	c.statUint("store_too_large", tot.storeTooLarge)
	c.statUint("store_no_memory", tot.storeNoMemory)
	c.statUint("auth_cmds", tot.authCmds)
	c.statUint("auth_errors", tot.authErrors)
	if s.cfg.IdleTimeout > 0 {
		c.statUint("idle_kicks", s.idleKicks.Load())
	}
	c.statUint("bytes_read", tot.bytesRead)
	c.statUint("bytes_written", tot.bytesWritten)
	c.statUint("limit_maxbytes", uint64(s.limitMaxbytes.Load()))
	c.statUint("accepting_conns", 1)
	c.statUint("listen_disabled_num", 0)
	c.statUint("time_in_listen_disabled_us", 0)
	c.statUint("threads", uint64(s.cfg.Threads))
	c.statUint("conn_yields", tot.connYields)
	c.statUint("hash_power_level", st.HashPowerLevel)
	c.statUint("hash_bytes", st.HashBytes)
	c.statUint("hash_is_expanding", 0)
	if s.cfg.SlabReassign {
		c.statUint("slab_reassign_rescues", st.SlabReassignRescues)
		c.statUint("slab_reassign_chunk_rescues", 0)
		c.statUint("slab_reassign_evictions_nomem", st.SlabReassignEvictionsNoMem)
		c.statUint("slab_reassign_inline_reclaim", 0)
		c.statUint("slab_reassign_busy_items", 0)
		c.statUint("slab_reassign_busy_deletes", 0)
		c.statUint("slab_reassign_running", 0)
		c.statUint("slabs_moved", st.SlabsMoved)
	}
	if s.cfg.LRUCrawler {
		c.statUint("lru_crawler_running", 0)
		c.statUint("lru_crawler_starts", s.crawlerStarts.Load())
	}
	maint := !s.cfg.NoLRUMaintainer
	if maint {
		c.statUint("lru_maintainer_juggles", 0)
	}
	c.statUint("malloc_fails", st.MallocFails)
	c.statUint("log_worker_dropped", 0)
	c.statUint("log_worker_written", 0)
	c.statUint("log_watcher_skipped", 0)
	c.statUint("log_watcher_sent", 0)
	c.statUint("log_watchers", 0)
	c.statUint("unexpected_napi_ids", 0)
	c.statUint("round_robin_fallback", 0)
	c.statUint("bytes", st.Bytes)
	c.statUint("curr_items", st.CurrItems)
	c.statUint("total_items", st.TotalItems)
	c.statUint("slab_global_page_pool", st.SlabGlobalPagePool)
	c.statUint("expired_unfetched", st.ExpiredUnfetched)
	c.statUint("evicted_unfetched", st.EvictedUnfetched)
	if maint {
		c.statUint("evicted_active", st.EvictedActive)
	}
	c.statUint("evictions", st.Evictions)
	c.statUint("reclaimed", st.Reclaimed)
	c.statUint("crawler_reclaimed", st.CrawlerReclaimed)
	c.statUint("crawler_items_checked", st.CrawlerItemsChecked)
	c.statUint("lrutail_reflocked", st.LRUTailRefLocked)
	if maint {
		c.statUint("moves_to_cold", st.MovesToCold)
		c.statUint("moves_to_warm", st.MovesToWarm)
		c.statUint("moves_within_lru", st.MovesWithinLRU)
		c.statUint("direct_reclaims", st.DirectReclaims)
		c.statUint("lru_bumps_dropped", 0)
	}
}

func protoName(p Protocol) string {
	switch p {
	case ProtoASCII:
		return "ascii"
	case ProtoBinary:
		return "binary"
	}
	return "auto-negotiate"
}

func (c *conn) settingsStats() {
	s := c.s
	cfg := &s.cfg
	tu := &s.tun
	tu.mu.Lock()
	defer tu.mu.Unlock()
	inter := "NULL"
	if len(cfg.Listen) > 0 {
		inter = cfg.Listen[0]
		for _, l := range cfg.Listen[1:] {
			inter += "," + l
		}
	}
	sock := "NULL"
	if cfg.UnixSocket != "" {
		sock = cfg.UnixSocket
	}
	mask := cfg.UnixMask
	if mask == 0 {
		mask = 0o700
	}
	port := cfg.Port
	if port < 0 {
		port = 0
	}
	delim := cfg.PrefixDelim
	if delim == 0 {
		delim = ':'
	}
	c.statUint("maxbytes", uint64(s.limitMaxbytes.Load()))
	c.statUint("maxconns", uint64(cfg.MaxConns))
	c.statLine("tcpport", strconv.Itoa(port))
	c.statLine("udpport", strconv.Itoa(cfg.UDPPort))
	c.statLine("inter", inter)
	c.statLine("verbosity", strconv.Itoa(int(s.verbosity.Load())))
	c.statUint("oldest", 0)
	c.statLine("evictions", map[bool]string{true: "off", false: "on"}[cfg.Store.NoEvict])
	c.statLine("domain_socket", sock)
	c.statLine("umask", strconv.FormatUint(uint64(mask), 8))
	c.statLine("shutdown_command", yesNo(cfg.EnableShutdown))
	c.statLine("growth_factor", fmt.Sprintf("%.2f", cfg.Store.GrowthFactor))
	c.statLine("chunk_size", strconv.Itoa(cfg.Store.ChunkSizeMin))
	c.statLine("num_threads", strconv.Itoa(cfg.Threads))
	c.statLine("num_threads_per_udp", strconv.Itoa(cfg.Threads))
	c.statLine("stat_key_prefix", string([]byte{delim}))
	c.statLine("detail_enabled", yesNo(s.detailEnabled.Load()))
	c.statLine("reqs_per_event", strconv.Itoa(cfg.ReqsPerEvent))
	c.statLine("cas_enabled", yesNo(!cfg.Store.DisableCAS))
	c.statLine("tcp_backlog", strconv.Itoa(cfg.Backlog))
	c.statLine("binding_protocol", protoName(cfg.Protocol))
	c.statLine("auth_enabled_sasl", yesNo(cfg.SASL))
	authFile := "no"
	if cfg.AuthFile != "" {
		authFile = cfg.AuthFile
	}
	c.statLine("auth_enabled_ascii", authFile)
	c.statLine("item_size_max", strconv.Itoa(cfg.Store.ItemSizeMax))
	c.statLine("maxconns_fast", yesNo(cfg.MaxConnsFast))
	c.statLine("hashpower_init", strconv.Itoa(s.hashpowerInit))
	c.statLine("slab_reassign", yesNo(cfg.SlabReassign))
	c.statLine("slab_automove", strconv.Itoa(tu.slabAutomove))
	c.statLine("slab_automove_ratio", fmt.Sprintf("%.2f", tu.automoveRatio))
	c.statLine("slab_automove_window", strconv.Itoa(tu.automoveWindow))
	c.statLine("slab_chunk_max", strconv.Itoa(cfg.Store.SlabChunkMax))
	c.statLine("lru_crawler", yesNo(s.crawlerOn.Load()))
	c.statLine("lru_crawler_sleep", strconv.Itoa(tu.crawlerSleep))
	c.statLine("lru_crawler_tocrawl", strconv.Itoa(tu.crawlerToCrawl))
	c.statLine("tail_repair_time", "0")
	c.statLine("flush_enabled", yesNo(!cfg.DisableFlush))
	c.statLine("dump_enabled", yesNo(!cfg.DisableDumps))
	c.statLine("hash_algorithm", "maphash")
	c.statLine("lru_maintainer_thread", yesNo(!cfg.NoLRUMaintainer))
	c.statLine("lru_segmented", yesNo(tu.segmented))
	c.statLine("hot_lru_pct", strconv.Itoa(tu.hotPct))
	c.statLine("warm_lru_pct", strconv.Itoa(tu.warmPct))
	c.statLine("hot_max_factor", fmt.Sprintf("%.2f", tu.hotFactor))
	c.statLine("warm_max_factor", fmt.Sprintf("%.2f", tu.warmFactor))
	c.statLine("temp_lru", yesNo(tu.tempLRU))
	c.statLine("temporary_ttl", strconv.Itoa(tu.tempTTL))
	c.statLine("idle_timeout", strconv.Itoa(int(cfg.IdleTimeout/time.Second)))
	c.statLine("watcher_logbuf_size", "262144")
	c.statLine("worker_logbuf_size", "65536")
	c.statLine("read_buf_mem_limit", "0")
	c.statLine("track_sizes", "no")
	c.statLine("inline_ascii_response", "no")
	c.statLine("ext_item_size", "512")
	c.statLine("ext_item_age", "4294967295")
	c.statLine("ext_low_ttl", "0")
	c.statLine("ext_recache_rate", "2000")
	c.statLine("ext_wbuf_size", "4194304")
	c.statLine("ext_compact_under", "0")
	c.statLine("ext_drop_under", "0")
	c.statLine("ext_max_sleep", "1000000")
	c.statLine("ext_max_frag", "0.80")
	c.statLine("slab_automove_freeratio", "0.010")
	c.statLine("ext_drop_unread", "no")
	c.statLine("ssl_enabled", "no")
	c.statLine("ssl_chain_cert", "(null)")
	c.statLine("ssl_key", "(null)")
	c.statLine("ssl_verify_mode", "0")
	c.statLine("ssl_keyformat", "1")
	c.statLine("ssl_ciphers", "NULL")
	c.statLine("ssl_ca_cert", "NULL")
	c.statLine("ssl_wbuf_size", "16384")
	c.statLine("ssl_session_cache", "no")
	c.statLine("ssl_kernel_tls", "no")
	c.statLine("ssl_min_version", "tlsv1.2")
	c.statLine("num_napi_ids", "(null)")
	c.statLine("memory_file", "(null)")
}

func (c *conn) itemStats() {
	s := c.s
	s.store.ReadClassStats(func(cs *store.ClassStats) {
		if cs.Number == 0 {
			return
		}
		p := "items:" + strconv.Itoa(cs.ID) + ":"
		c.statUint(p+"number", cs.Number)
		if !s.cfg.NoLRUMaintainer {
			c.statUint(p+"number_hot", cs.NumberHot)
			c.statUint(p+"number_warm", cs.NumberWarm)
			c.statUint(p+"number_cold", cs.NumberCold)
			c.statUint(p+"age_hot", cs.AgeHot)
			c.statUint(p+"age_warm", cs.AgeWarm)
		}
		c.statUint(p+"age", cs.Age)
		c.statUint(p+"mem_requested", cs.MemRequested)
		c.statUint(p+"evicted", cs.Evicted)
		c.statUint(p+"evicted_nonzero", cs.EvictedNonzero)
		c.statUint(p+"evicted_time", cs.EvictedTime)
		c.statUint(p+"outofmemory", cs.OutOfMemory)
		c.statUint(p+"tailrepairs", 0)
		c.statUint(p+"reclaimed", cs.Reclaimed)
		c.statUint(p+"expired_unfetched", cs.ExpiredUnfetched)
		c.statUint(p+"evicted_unfetched", cs.EvictedUnfetched)
		maint := !s.cfg.NoLRUMaintainer
		if maint {
			c.statUint(p+"evicted_active", cs.EvictedActive)
		}
		c.statUint(p+"crawler_reclaimed", cs.CrawlerReclaimed)
		c.statUint(p+"crawler_items_checked", cs.CrawlerItemsChecked)
		c.statUint(p+"lrutail_reflocked", 0)
		if maint {
			c.statUint(p+"moves_to_cold", cs.MovesToCold)
			c.statUint(p+"moves_to_warm", cs.MovesToWarm)
			c.statUint(p+"moves_within_lru", cs.MovesWithinLRU)
			c.statUint(p+"direct_reclaims", cs.DirectReclaims)
			c.statUint(p+"hits_to_hot", cs.HitsToHot)
			c.statUint(p+"hits_to_warm", cs.HitsToWarm)
			c.statUint(p+"hits_to_cold", cs.HitsToCold)
			c.statUint(p+"hits_to_temp", 0)
		}
	})
}

func (c *conn) slabStats() {
	s := c.s
	var tot totals
	s.sumCounters(&tot)
	active := 0
	var st store.Stats
	s.store.ReadStats(&st)
	s.store.ReadClassStats(func(cs *store.ClassStats) {
		if cs.TotalPages == 0 {
			return
		}
		active++
		p := strconv.Itoa(cs.ID) + ":"
		ct := &tot.class[classIdx(cs.ID)]
		c.statUint(p+"chunk_size", cs.ChunkSize)
		c.statUint(p+"chunks_per_page", cs.ChunksPerPage)
		c.statUint(p+"total_pages", cs.TotalPages)
		c.statUint(p+"total_chunks", cs.TotalChunks)
		c.statUint(p+"used_chunks", cs.UsedChunks)
		c.statUint(p+"free_chunks", cs.FreeChunks)
		c.statUint(p+"free_chunks_end", cs.FreeChunksEnd)
		c.statUint(p+"get_hits", ct.getHits)
		c.statUint(p+"cmd_set", ct.cmdSet)
		c.statUint(p+"delete_hits", ct.deleteHits)
		c.statUint(p+"incr_hits", ct.incrHits)
		c.statUint(p+"decr_hits", ct.decrHits)
		c.statUint(p+"cas_hits", ct.casHits)
		c.statUint(p+"cas_badval", ct.casBadval)
		c.statUint(p+"touch_hits", ct.touchHits)
	})
	c.statUint("active_slabs", uint64(active))
	c.statUint("total_malloced", st.TotalMalloced)
}

func addrString(a net.Addr) string {
	if a == nil {
		return "unknown"
	}
	switch a.Network() {
	case "unix":
		return "unix:" + a.String()
	case "udp":
		return "udp:" + a.String()
	}
	return "tcp:" + a.String()
}

func (c *conn) connStats() {
	s := c.s
	now := s.nowUnix()
	s.mu.Lock()
	lns := s.listeners
	udp := s.udp
	conns := make([]*conn, 0, len(s.conns))
	for _, x := range s.conns {
		conns = append(conns, x)
	}
	s.mu.Unlock()
	sort.Slice(conns, func(i, j int) bool { return conns[i].fd < conns[j].fd })
	fd := s.firstListenFD()
	for _, l := range lns {
		p := strconv.Itoa(fd) + ":"
		fd++
		c.statLine(p+"addr", addrString(l.Addr()))
		c.statLine(p+"state", "conn_listening")
		c.statLine(p+"secs_since_last_cmd", "0")
	}
	for _, u := range udp {
		for range s.cfg.Threads { // memcached has one UDP socket per thread
			p := strconv.Itoa(fd) + ":"
			fd++
			c.statLine(p+"addr", addrString(u.LocalAddr()))
			c.statLine(p+"state", "conn_read")
			c.statLine(p+"secs_since_last_cmd", "0")
		}
	}
	for _, x := range conns {
		p := strconv.Itoa(x.fd) + ":"
		c.statLine(p+"addr", addrString(x.raddr))
		c.statLine(p+"listen_addr", addrString(x.listen))
		c.statLine(p+"state", connState(x.state.Load()).String())
		c.statUint(p+"secs_since_last_cmd", uint64(max(now-x.lastCmd.Load(), 0)))
	}
}

// prefixStats is "stats detail": per key prefix counts of gets, hits, sets
// and deletes. It is off the fast path (only used while detail is on).
type prefixStats struct {
	mu    sync.Mutex // protects m and order (memory only; replies are appended to c.out, not written)
	delim byte
	m     map[string]*prefixEntry
	order []string
}

type prefixEntry struct{ gets, hits, sets, dels uint64 }

func (p *prefixStats) init() {
	p.m = make(map[string]*prefixEntry)
	if p.delim == 0 {
		p.delim = ':'
	}
}

func (p *prefixStats) find(key []byte) *prefixEntry {
	n := -1
	for i, b := range key {
		if b == 0 {
			break
		}
		if b == p.delim {
			n = i
			break
		}
	}
	if n < 0 {
		return nil
	}
	e := p.m[string(key[:n])]
	if e == nil {
		e = &prefixEntry{}
		p.m[string(key[:n])] = e
		p.order = append(p.order, string(key[:n]))
	}
	return e
}

func (p *prefixStats) recordGet(key []byte, hit bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if e := p.find(key); e != nil {
		e.gets++
		if hit {
			e.hits++
		}
	}
}

func (p *prefixStats) recordSet(key []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if e := p.find(key); e != nil {
		e.sets++
	}
}

func (p *prefixStats) recordDelete(key []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if e := p.find(key); e != nil {
		e.dels++
	}
}

func (p *prefixStats) dump(dst []byte) []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, k := range p.order {
		e := p.m[k]
		dst = fmt.Appendf(dst, "PREFIX %s get %d hit %d set %d del %d\r\n", k, e.gets, e.hits, e.sets, e.dels)
	}
	return dst
}

func (p *prefixStats) clear() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.m = make(map[string]*prefixEntry)
	p.order = nil
}

func (s *Server) resetStats() {
	s.resetCounters()
	s.store.ResetStats()
	s.detail.clear()
	s.totalConns.Store(0)
	s.rejectedConns.Store(0)
	s.idleKicks.Store(0)
}

// lruCrawler is memcached's process_lru_crawler_command.
func (c *conn) lruCrawler() {
	t := &c.req.Tokens
	s := c.s
	sub := ""
	if t.N > 2 {
		sub = string(t.T[1])
	}
	switch {
	case t.N == 4 && sub == "crawl":
		if !s.crawlerOn.Load() {
			c.reply("CLIENT_ERROR lru crawler disabled")
			return
		}
		if !validClassList(t.T[2]) {
			c.reply("BADCLASS invalid class id")
			return
		}
		s.store.Crawl()
		s.crawlerStarts.Add(1)
		c.reply("OK")
	case t.N == 4 && sub == "metadump":
		if !s.crawlerOn.Load() {
			c.reply("CLIENT_ERROR lru crawler disabled")
			return
		}
		if s.cfg.DisableDumps {
			c.reply("ERROR metadump not allowed")
			return
		}
		if c.mark != len(c.out) || len(c.out) > 0 {
			c.reply("ERROR cannot pipeline other commands before metadump")
			return
		}
		if !validClassList(t.T[2]) {
			c.reply("BADCLASS invalid class id")
			return
		}
		s.store.MetaDump(func(it *store.DumpItem) {
			c.out = append(c.out, "key="...)
			c.out = appendURIEncoded(c.out, it.Key)
			c.out = append(c.out, " exp="...)
			c.out = protocol.AppendInt(c.out, it.Exptime)
			c.out = append(c.out, " la="...)
			c.out = protocol.AppendInt(c.out, it.LastAccess)
			c.out = append(c.out, " cas="...)
			c.out = protocol.AppendUint(c.out, it.CAS)
			if it.Fetched {
				c.out = append(c.out, " fetch=yes"...)
			} else {
				c.out = append(c.out, " fetch=no"...)
			}
			c.out = append(c.out, " cls="...)
			c.out = protocol.AppendInt(c.out, int64(it.ClassID))
			c.out = append(c.out, " size="...)
			c.out = protocol.AppendInt(c.out, int64(it.Size))
			c.out = append(c.out, '\r', '\n')
			if len(c.out) >= flushAt {
				c.flush()
			}
		})
		c.out = append(c.out, "END\r\n"...)
		s.crawlerStarts.Add(1)
	case t.N == 4 && sub == "tocrawl":
		v, ok := protocol.ParseUint32(t.T[2])
		if !ok {
			c.reply("CLIENT_ERROR bad command line format")
			return
		}
		s.tun.mu.Lock()
		s.tun.crawlerToCrawl = int(v)
		s.tun.mu.Unlock()
		c.reply("OK")
	case t.N == 4 && sub == "sleep":
		v, ok := protocol.ParseUint32(t.T[2])
		if !ok {
			c.reply("CLIENT_ERROR bad command line format")
			return
		}
		if v > 1000000 {
			c.reply("CLIENT_ERROR sleep must be one second or less")
			return
		}
		s.tun.mu.Lock()
		s.tun.crawlerSleep = int(v)
		s.tun.mu.Unlock()
		c.reply("OK")
	case t.N == 3 && sub == "enable":
		s.crawlerOn.Store(true)
		s.store.SetCrawler(true)
		c.reply("OK")
	case t.N == 3 && sub == "disable":
		s.crawlerOn.Store(false)
		s.store.SetCrawler(false)
		c.reply("OK")
	default:
		c.reply("ERROR")
	}
}

// validClassList accepts "all" or a comma-separated list of class ids
// below maxClasses (memcached's lru_crawler argument).
func validClassList(b []byte) bool {
	if string(b) == "all" {
		return true
	}
	start := 0
	for i := 0; i <= len(b); i++ {
		if i == len(b) || b[i] == ',' {
			v, ok := protocol.ParseUint32(b[start:i])
			if !ok || v >= maxClasses {
				return false
			}
			start = i + 1
		}
	}
	return true
}

// appendURIEncoded percent-encodes everything but unreserved characters,
// as memcached's metadump does for keys.
func appendURIEncoded(dst, src []byte) []byte {
	const hex = "0123456789ABCDEF"
	for _, b := range src {
		if (b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z') || (b >= '0' && b <= '9') ||
			b == '-' || b == '.' || b == '_' || b == '~' {
			dst = append(dst, b)
			continue
		}
		dst = append(dst, '%', hex[b>>4], hex[b&15])
	}
	return dst
}

// slabs is memcached's process_slabs_command.
func (c *conn) slabs() {
	t := &c.req.Tokens
	s := c.s
	if t.N == 5 && string(t.T[1]) == "reassign" {
		if !s.cfg.SlabReassign {
			c.reply("CLIENT_ERROR slab reassignment disabled")
			return
		}
		src, ok1 := protocol.ParseInt32(t.T[2])
		dst, ok2 := protocol.ParseInt32(t.T[3])
		if !ok1 || !ok2 {
			c.reply("CLIENT_ERROR bad command line format")
			return
		}
		switch err := s.store.Reassign(int(src), int(dst)); err {
		case nil:
			c.reply("OK")
		case store.ErrBadClass:
			c.reply("BADCLASS invalid src or dst class id")
		case store.ErrSameClass:
			c.reply("SAME src and dst class are identical")
		default:
			c.reply("NOSPARE source class has no spare pages")
		}
		return
	}
	if t.N >= 4 && string(t.T[1]) == "automove" {
		c.setNoreply()
		if string(t.T[2]) == "ratio" {
			var ratio float64
			var err error
			if t.N >= 5 {
				ratio, err = strconv.ParseFloat(string(t.T[3]), 64)
			}
			if t.N < 5 || err != nil {
				c.reply("ERROR")
				return
			}
			s.tun.mu.Lock()
			s.tun.automoveRatio = ratio
			s.tun.mu.Unlock()
			c.reply("OK")
			return
		}
		lvl, ok := protocol.ParseUint32(t.T[2])
		if !ok {
			c.reply("CLIENT_ERROR bad command line format")
			return
		}
		if lvl > 2 {
			c.reply("ERROR")
			return
		}
		s.tun.mu.Lock()
		s.tun.slabAutomove = int(lvl)
		s.tun.mu.Unlock()
		c.reply("OK")
		return
	}
	c.reply("ERROR")
}

// lru is memcached's process_lru_command. Tuning changes what "stats
// settings" reports and the store's LRU split.
func (c *conn) lru() {
	t := &c.req.Tokens
	s := c.s
	c.setNoreply()
	sub := string(t.T[1])
	tu := &s.tun
	switch {
	case sub == "tune" && t.N >= 7:
		hot, ok1 := protocol.ParseUint32(t.T[2])
		warm, ok2 := protocol.ParseUint32(t.T[3])
		hf, err1 := strconv.ParseFloat(string(t.T[4]), 64)
		wf, err2 := strconv.ParseFloat(string(t.T[5]), 64)
		switch {
		case !ok1 || !ok2 || err1 != nil || err2 != nil:
			c.reply("ERROR")
		case hot+warm > 80:
			c.reply("ERROR hot and warm pcts must not exceed 80")
		case wf <= 0 || hf <= 0:
			c.reply("ERROR hot/warm age factors must be greater than 0")
		default:
			tu.mu.Lock()
			tu.hotPct, tu.warmPct, tu.hotFactor, tu.warmFactor = int(hot), int(warm), hf, wf
			tu.mu.Unlock()
			s.store.SetLRU(int(hot), int(warm), !tu.segmented)
			c.reply("OK")
		}
	case sub == "mode" && t.N >= 4 && !s.cfg.NoLRUMaintainer:
		switch string(t.T[2]) {
		case "flat", "segmented":
			tu.mu.Lock()
			tu.segmented = string(t.T[2]) == "segmented"
			hot, warm, flat := tu.hotPct, tu.warmPct, !tu.segmented
			tu.mu.Unlock()
			s.store.SetLRU(hot, warm, flat)
			c.reply("OK")
		default:
			c.reply("ERROR")
		}
	case sub == "temp_ttl" && t.N >= 4 && !s.cfg.NoLRUMaintainer:
		v, ok := protocol.ParseInt32(t.T[2])
		if !ok {
			c.reply("ERROR")
			return
		}
		tu.mu.Lock()
		tu.tempLRU = v >= 0
		if v >= 0 {
			tu.tempTTL = int(v)
		}
		tu.mu.Unlock()
		c.reply("OK")
	default:
		c.reply("ERROR")
	}
}

// watch is not implemented yet: vbcache has no log stream. It answers the
// way memcached answers when watchers cannot be added.
func (c *conn) watch() {
	c.setNoreply()
	if c.s.cfg.DisableWatch {
		c.reply("CLIENT_ERROR watch commands not allowed")
		return
	}
	c.reply("WATCHER_FAILED failed to add log watcher")
}
