package server

import (
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"runtime"
	"sort"
	"strconv"
	"syscall"
	"time"

	"github.com/vbcache/vbcache/internal/protocol"
	"github.com/vbcache/vbcache/internal/store"
	"github.com/vbcache/vbcache/internal/tlsconf"
)

// This file serves "stats" and its subcommands in the text protocol
// (general, settings, items, slabs, conns, cachedump, detail, reset, ...)
// and the stat lines they share with the binary protocol's Stat
// (binary.go). "stats detail" keeps its counts in statsdetail.go; "stats
// vbucket" and "stats streams" are in cluster.go and streams.go. None of
// it is on the request path, so it favours clarity over allocation-free
// code.

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
	if s.cfg.MaxConnsPerIP > 0 { // vbcache's, as below
		c.statUint("rejected_connections_per_ip", s.rejectedPerIP.Load())
	}
	if s.cfg.MaxUnauthConns > 0 { // vbcache's: memcached's stats have no such lines
		c.statUint("unauthenticated_connections", uint64(max(s.unauth.Load(), 0)))
		c.statUint("rejected_unauthenticated_connections", s.rejectedUnauth.Load())
	}
	if s.cfg.TLS != nil { // memcached's, with -Z
		c.statUint("ssl_handshake_errors", s.tlsHandshakeErrors.Load())
	}
	if s.cl != nil { // cluster mode: control requests refused without the admin role
		c.statUint("control_refused", s.cl.controlRefused.Load())
	}
	c.statUint("connection_structures", s.connStructures.Load())
	c.statUint("response_obj_oom", s.outputNoMemory.Load()) // replies refused for output memory (input.go)
	c.statUint("response_obj_count", curr)
	c.statUint("response_obj_bytes", curr*readBufSize)
	c.statUint("read_buf_count", curr)
	c.statUint("read_buf_bytes", curr*readBufSize)
	c.statUint("read_buf_bytes_free", 0)
	c.statUint("read_buf_oom", s.inputNoMemory.Load()) // requests refused for input memory
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
	if s.cfg.UnauthTimeout > 0 { // vbcache's, shown only when set
		c.statUint("unauth_kicks", s.unauthKicks.Load())
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
	c.statUint("log_watcher_skipped", s.watch.skipped.Load())
	c.statUint("log_watcher_sent", s.watch.sent.Load())
	c.statUint("log_watchers", uint64(s.watch.count()))
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
	if cfg.MaxConnsPerIP > 0 { // vbcache's settings, shown only when set
		c.statUint("max_conns_per_ip", uint64(cfg.MaxConnsPerIP))
	}
	if cfg.MaxUnauthConns > 0 {
		c.statUint("max_unauth_conns", uint64(cfg.MaxUnauthConns))
	}
	if cfg.UnauthTimeout > 0 {
		c.statLine("unauth_timeout", strconv.Itoa(int(cfg.UnauthTimeout/time.Second)))
	}
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
	c.sslSettings(s.cfg.TLSSettings)
	c.statLine("num_napi_ids", "(null)")
	c.statLine("memory_file", "(null)")
}

// sslSettings writes the ssl_* lines of "stats settings" as memcached
// does: its defaults without -Z, and with it the values given (a file
// not given is "(null)" for the certificate and key, "NULL" for the CA
// and ciphers; ssl_wbuf_size in bytes).
func (c *conn) sslSettings(t *tlsconf.Options) {
	orNull := func(v, null string) string {
		if v == "" {
			return null
		}
		return v
	}
	if t == nil {
		t = &tlsconf.Options{}
	}
	c.statLine("ssl_enabled", yesNo(c.s.cfg.TLSSettings != nil))
	c.statLine("ssl_chain_cert", orNull(t.ChainCert, "(null)"))
	c.statLine("ssl_key", orNull(t.Key, "(null)"))
	c.statUint("ssl_verify_mode", uint64(t.VerifyMode))
	c.statLine("ssl_keyformat", "1") // PEM, the only one accepted
	c.statLine("ssl_ciphers", orNull(t.Ciphers, "NULL"))
	c.statLine("ssl_ca_cert", orNull(t.CACert, "NULL"))
	wbuf := 16384
	if t.WBufSize > 0 {
		wbuf = t.WBufSize * 1024
	}
	c.statUint("ssl_wbuf_size", uint64(wbuf))
	c.statLine("ssl_session_cache", yesNo(t.SessionCache))
	c.statLine("ssl_kernel_tls", yesNo(t.KernelTLS))
	minVersion := map[uint16]string{tls.VersionTLS10: "tlsv1.0", tls.VersionTLS11: "tlsv1.1", tls.VersionTLS13: "tlsv1.3"}[t.MinVersion]
	c.statLine("ssl_min_version", orNull(minVersion, "tlsv1.2"))
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

func (s *Server) resetStats() {
	s.resetCounters()
	s.store.ResetStats()
	s.detail.clear()
	s.totalConns.Store(0)
	s.rejectedConns.Store(0)
	s.idleKicks.Store(0)
	s.unauthKicks.Store(0)
}
