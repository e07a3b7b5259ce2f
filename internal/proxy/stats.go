package proxy

import (
	"os"
	"runtime"
	"sort"
	"strconv"
	"syscall"
	"time"

	"github.com/vbcache/vbcache/internal/protocol"
)

// statLines returns the proxy's "stats": memcached's general stats that
// clients and tools expect (from the proxy's own point of view: its
// client connections and the commands it served), then per-server lines
// "server:<addr>:requests|errors|latency_us_avg|latency_us_p99|
// connections|total_connections|ejected".
func (p *Proxy) statLines() [][2]string {
	now := time.Now()
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	tv := func(t syscall.Timeval) string {
		return strconv.FormatInt(int64(t.Sec), 10) + "." + leftPad(strconv.FormatInt(int64(t.Usec), 10), 6)
	}
	c := &p.ctr
	i := func(v int64) string { return strconv.FormatInt(v, 10) }
	u := p.cur.Load()
	mode := "pool"
	if u.cluster {
		mode = "cluster"
	}
	out := [][2]string{
		{"pid", i(int64(os.Getpid()))},
		{"uptime", i(int64(now.Sub(p.started).Seconds()))},
		{"time", i(now.Unix())},
		{"version", p.Version},
		{"libevent", "none"},
		{"pointer_size", i(int64(strconv.IntSize))},
		{"rusage_user", tv(ru.Utime)},
		{"rusage_system", tv(ru.Stime)},
		{"max_connections", "1024"},
		{"curr_connections", i(c.currConns.Load())},
		{"total_connections", i(c.totalConns.Load())},
		{"cmd_get", i(c.cmdGet.Load())},
		{"cmd_set", i(c.cmdSet.Load())},
		{"cmd_flush", i(c.cmdFlush.Load())},
		{"cmd_touch", i(c.cmdTouch.Load())},
		{"get_hits", i(c.getHits.Load())},
		{"get_misses", i(c.getMisses.Load())},
		{"delete_misses", i(c.deleteMisses.Load())},
		{"delete_hits", i(c.deleteHits.Load())},
		{"incr_misses", i(c.incrMisses.Load())},
		{"incr_hits", i(c.incrHits.Load())},
		{"decr_misses", i(c.decrMisses.Load())},
		{"decr_hits", i(c.decrHits.Load())},
		{"cas_misses", i(c.casMisses.Load())},
		{"cas_hits", i(c.casHits.Load())},
		{"cas_badval", i(c.casBadval.Load())},
		{"touch_hits", i(c.touchHits.Load())},
		{"touch_misses", i(c.touchMisses.Load())},
		{"bytes_read", i(c.bytesRead.Load())},
		{"bytes_written", i(c.bytesWritten.Load())},
		{"threads", i(int64(runtime.GOMAXPROCS(0)))},
		{"proxy_upstream", mode},
		{"proxy_reloads", i(c.reloads.Load())},
		{"proxy_reload_errors", i(c.reloadErrors.Load())},
		{"proxy_fast_path", i(c.fastPath.Load())},
		{"ssl_handshake_errors", i(c.tlsHandshakeErrors.Load())},
		{"auth_cmds", i(c.authCmds.Load())},
		{"auth_errors", i(c.authErrors.Load())},
	}
	if rt := u.route.Load(); u.cluster && rt != nil {
		out = append(out, [2]string{"proxy_map_rev", i(rt.RevEpoch) + "." + i(rt.Rev)})
	}
	// Per server: the current upstream's servers, then any other server
	// with counts (from an earlier generation or a cluster's old map).
	cur := u.servers()
	p.st.mu.Lock()
	names := make([]string, 0, len(p.st.m))
	for a := range p.st.m {
		names = append(names, a)
	}
	p.st.mu.Unlock()
	sort.Strings(names)
	seen := make(map[string]bool)
	for _, a := range append(cur, names...) {
		if seen[a] {
			continue
		}
		seen[a] = true
		s := p.st.get(a)
		req := s.requests.Load()
		avg := int64(0)
		if req > 0 {
			avg = s.latencyUs.Load() / req
		}
		ejected := int64(0)
		if cfg := u.cfg; cfg.AutoEjectHosts && !u.cluster {
			limit := int64(cfg.ServerFailureLimit)
			if limit <= 0 {
				limit = 2
			}
			retry := ms(cfg.ServerRetryTimeout, 30*time.Second)
			if s.consecFail.Load() >= limit && now.Sub(time.Unix(0, s.lastFail.Load())) < retry {
				ejected = 1
			}
		}
		pre := "server:" + a + ":"
		out = append(out,
			[2]string{pre + "requests", i(req)},
			[2]string{pre + "errors", i(s.errors.Load())},
			[2]string{pre + "latency_us_avg", i(avg)},
			[2]string{pre + "latency_us_p99", i(s.p99())},
			[2]string{pre + "connections", i(s.conns.Load())},
			[2]string{pre + "total_connections", i(s.totalConns.Load())},
			[2]string{pre + "ejected", i(ejected)},
		)
	}
	return out
}

func leftPad(s string, n int) string {
	for len(s) < n {
		s = "0" + s
	}
	return s
}

// stats serves the text "stats" command: the general stats for "stats"
// and "stats proxy", RESET for "stats reset" (which the proxy ignores),
// and ERROR for anything else, as memcached answers an unknown group.
func (c *conn) stats() {
	c.out = c.p.appendStats(c.out, &c.req.Tokens)
}

// appendStats appends the reply to the text "stats" request of tokens t.
func (p *Proxy) appendStats(out []byte, t *protocol.Tokens) []byte {
	if t.N > 2 {
		switch string(t.T[1]) {
		case "proxy", "servers":
		case "reset":
			return append(out, "RESET\r\n"...)
		default:
			return append(out, "ERROR\r\n"...)
		}
	}
	for _, kv := range p.statLines() {
		out = append(out, "STAT "...)
		out = append(out, kv[0]...)
		out = append(out, ' ')
		out = append(out, kv[1]...)
		out = append(out, '\r', '\n')
	}
	return append(out, "END\r\n"...)
}
