package server

import (
	"math"
	"strconv"
	"sync"

	"github.com/vbcache/vbcache/internal/protocol"
	"github.com/vbcache/vbcache/internal/store"
)

// This file serves the admin commands that tune or inspect the node at
// run time, other than stats (stats.go): lru_crawler (crawl, metadump,
// tocrawl, sleep, enable, disable), slabs (reassign, automove), lru (tune,
// mode, temp_ttl) and watch, and holds the tunables they change. The
// other admin commands (flush_all, verbosity, version, cache_memlimit,
// shutdown) are dispatched and served in classic.go. None of it is on the
// request path, so it favours clarity over allocation-free code.

// tunables are the settings that admin commands change at run time.
type tunables struct {
	// mu protects every field. settingsStats holds it while it appends
	// the settings to c.out; lru tune and lru mode copy what the store
	// needs and release it before they call store.SetLRU. Nothing under
	// it takes another lock or touches a socket: replies go to c.out.
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
		c.setTunable(&s.tun.crawlerToCrawl, t.T[2], math.MaxUint32, "")
	case t.N == 4 && sub == "sleep":
		c.setTunable(&s.tun.crawlerSleep, t.T[2], 1000000, "CLIENT_ERROR sleep must be one second or less")
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

// setTunable is the shape shared by the admin commands that set one
// numeric tunable: tok must be an unsigned 32-bit number ("CLIENT_ERROR
// bad command line format" if not) no greater than limit (tooLarge if it
// is); then *field, which must be a field of c.s.tun, takes it under
// c.s.tun.mu and the reply is OK.
func (c *conn) setTunable(field *int, tok []byte, limit uint32, tooLarge string) {
	v, ok := protocol.ParseUint32(tok)
	if !ok {
		c.reply("CLIENT_ERROR bad command line format")
		return
	}
	if v > limit {
		c.reply(tooLarge)
		return
	}
	tu := &c.s.tun
	tu.mu.Lock()
	*field = int(v)
	tu.mu.Unlock()
	c.reply("OK")
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
		c.setTunable(&s.tun.slabAutomove, t.T[2], 2, "ERROR")
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
			flat := !tu.segmented
			tu.mu.Unlock()
			s.store.SetLRU(int(hot), int(warm), flat)
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
