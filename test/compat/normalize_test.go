package compat

// This file is the one place that says which parts of a reply may
// legitimately differ between memcached and vbcache. Everything not named
// here must match byte for byte. Each rule is applied to both servers'
// replies before they are compared.
//
// Rules:
//
//  1. CAS unique numbers (the 5th field of a VALUE line from gets/gats, a
//     meta "c<n>" return flag, me's "cas=<n>") are renamed <cas1>, <cas2>,
//     … in order of first appearance within the script run. Equal numbers
//     get the same name, so "the CAS did (not) change" is still checked. Kept
//     verbatim: 0 (CAS disabled, -C) and values of 3 or more digits that the
//     script itself wrote as E<n> (an explicit new CAS).
//  2. `VERSION <x>` → `VERSION *`.
//  3. TTLs that count down (meta "t<n>", me's "exp=<n>"): a value n with a
//     number L written in the script and L-2 <= |n| <= L+1 is shown as "~L"
//     (or "~-L" for negative n), so a clock tick between the store and the
//     read does not matter (L+1: memcached's clock lags the wall clock by
//     up to a second, so a TTL set as an absolute time can read one more).
//     -1 is kept.
//  4. Seconds since last access (meta "l<n>", me's "la=<n>") of 0..2 → "~0".
//  5. me's cls= and size= → "*" (slab class and item size depend on the
//     item header layout, which is the implementation's own).
//  6. `STAT <name> <value>`: the value is replaced by "*" for the names in
//     volatileStats (general stats and stats settings), volatileItemStats
//     (stats items, `items:<cls>:<name>`) and volatileSlabStats (stats
//     slabs, `<cls>:<name>`). The names and their order are always compared.
//  7. stats conns: the fd prefix, the port in addresses and
//     secs_since_last_cmd → "*".
//  8. stats cachedump: a nonzero absolute expiry time in `ITEM <k> [<n> b;
//     <t> s]` → "*".
//  9. stats detail dump: the PREFIX lines are sorted (memcached lists them
//     in its hash table's order).

import (
	"bytes"
	"sort"
	"strconv"
	"strings"
)

// volatileStats are `stats` and `stats settings` fields whose values depend
// on the process, the clock, the platform or the implementation's internals.
var volatileStats = map[string]bool{
	// process, clock, platform
	"pid": true, "uptime": true, "time": true, "version": true, "libevent": true,
	"pointer_size": true, "rusage_user": true, "rusage_system": true,
	// connection bookkeeping: the harness's own probe connections count
	"curr_connections": true, "total_connections": true, "connection_structures": true,
	"reserved_fds": true, "time_in_listen_disabled_us": true, "conn_yields": true,
	// byte counts depend on CAS digits and on item header layout
	"bytes_read": true, "bytes_written": true, "bytes": true,
	// internal memory management
	"hash_power_level": true, "hash_bytes": true, "hash_is_expanding": true,
	"response_obj_oom": true, "response_obj_count": true, "response_obj_bytes": true,
	"read_buf_oom": true, "read_buf_count": true, "read_buf_bytes": true, "read_buf_bytes_free": true,
	"malloc_fails": true, "total_malloced": true, "slab_global_page_pool": true,
	"slab_reassign_rescues": true, "slab_reassign_chunk_rescues": true, "slab_reassign_evictions_nomem": true,
	"slab_reassign_inline_reclaim": true, "slab_reassign_busy_items": true, "slab_reassign_busy_deletes": true,
	"slab_reassign_running": true, "slabs_moved": true,
	// background threads (LRU maintainer, crawler, logger) run on their own clock
	"lru_crawler_running": true, "lru_crawler_starts": true, "lru_maintainer_juggles": true,
	"crawler_reclaimed": true, "crawler_items_checked": true, "lrutail_reflocked": true,
	"moves_to_cold": true, "moves_to_warm": true, "moves_within_lru": true, "direct_reclaims": true,
	"lru_bumps_dropped": true, "reclaimed": true, "expired_unfetched": true, "evicted_unfetched": true,
	"evicted_active":     true,
	"log_worker_dropped": true, "log_worker_written": true, "log_watcher_skipped": true,
	"log_watcher_sent": true, "log_watchers": true,
	"unexpected_napi_ids": true, "round_robin_fallback": true,
	// stats settings
	"tcpport": true,
	// the index hash: memcached uses murmur3, vbcache Go's maphash (a
	// different, seeded hash; nothing a client can observe depends on it)
	"hash_algorithm": true,
}

// volatileItemStats are per-class `stats items` fields that depend on LRU
// segment timing or item layout. Kept exact: number, evicted,
// evicted_nonzero, outofmemory.
var volatileItemStats = map[string]bool{
	"number_hot": true, "number_warm": true, "number_cold": true, "number_temp": true,
	"age_hot": true, "age_warm": true, "age": true, "mem_requested": true, "evicted_time": true,
	"tailrepairs": true, "reclaimed": true, "expired_unfetched": true, "evicted_unfetched": true,
	"evicted_active": true, "crawler_reclaimed": true, "crawler_items_checked": true,
	"lrutail_reflocked": true, "moves_to_cold": true, "moves_to_warm": true, "moves_within_lru": true,
	"direct_reclaims": true, "hits_to_hot": true, "hits_to_warm": true, "hits_to_cold": true,
	"hits_to_temp": true,
}

// volatileSlabStats are per-class `stats slabs` fields that depend on page
// accounting. Kept exact: chunk_size, chunks_per_page, used_chunks and the
// per-class command counters.
var volatileSlabStats = map[string]bool{
	"total_pages": true, "total_chunks": true, "free_chunks": true, "free_chunks_end": true,
	"mem_requested": true,
}

// connStats are per-connection `stats conns` fields.
var connStats = map[string]bool{"addr": true, "listen_addr": true, "state": true, "secs_since_last_cmd": true}

// normalizer applies the rules for one server's run of one script. It is
// stateful: CAS names are assigned in order of appearance.
type normalizer struct {
	sc     *script
	casNum map[string]string // actual → "casN"
	casVal map[string]string // "casN" → actual
}

func newNormalizer(sc *script) *normalizer {
	return &normalizer{sc: sc, casNum: map[string]string{}, casVal: map[string]string{}}
}

// lookup implements vars.
func (n *normalizer) lookup(name string) (string, error) {
	if strings.HasPrefix(name, "now") {
		return nowVar(name)
	}
	if v, ok := n.casVal[name]; ok {
		return v, nil
	}
	// An unknown CAS name is sent as a number no server has handed out, so
	// the exchange still happens (and differs if the servers differ).
	return "999999999", nil
}

func (n *normalizer) cas(v string) string {
	if v == "0" || n.sc.fixedCAS[v] {
		return v
	}
	if _, err := strconv.ParseUint(v, 10, 64); err != nil {
		return v
	}
	name, ok := n.casNum[v]
	if !ok {
		name = "cas" + strconv.Itoa(len(n.casNum)+1)
		n.casNum[v] = name
		n.casVal[name] = v
	}
	return "<" + name + ">"
}

func (n *normalizer) ttl(v string) string {
	t, err := strconv.ParseInt(v, 10, 64)
	if err != nil || t == -1 {
		return v
	}
	sign := ""
	if t < 0 {
		t, sign = -t, "-"
	}
	best := int64(-1)
	for _, l := range n.sc.literals {
		if l+1 >= t && l-t <= 2 && (best < 0 || l < best) {
			best = l
		}
	}
	if best < 0 {
		return v
	}
	return "~" + sign + strconv.FormatInt(best, 10)
}

func lastAccess(v string) string {
	if t, err := strconv.Atoi(v); err == nil && t >= 0 && t <= 2 {
		return "~0"
	}
	return v
}

// reply normalizes one step's reply. Data blocks of VALUE and VA replies are
// copied untouched.
func (n *normalizer) reply(b []byte) []byte {
	return sortPrefixLines(n.replyLines(b))
}

// sortPrefixLines sorts each run of consecutive "PREFIX " lines.
func sortPrefixLines(b []byte) []byte {
	if !bytes.Contains(b, []byte("PREFIX ")) {
		return b
	}
	lines := bytes.SplitAfter(b, []byte("\r\n"))
	for i := 0; i < len(lines); {
		j := i
		for j < len(lines) && bytes.HasPrefix(lines[j], []byte("PREFIX ")) && bytes.HasSuffix(lines[j], []byte("\r\n")) {
			j++
		}
		if j > i {
			sort.Slice(lines[i:j], func(a, b int) bool { return bytes.Compare(lines[i+a], lines[i+b]) < 0 })
			i = j
		} else {
			i++
		}
	}
	return bytes.Join(lines, nil)
}

func (n *normalizer) replyLines(b []byte) []byte {
	var out []byte
	for len(b) > 0 {
		i := bytes.Index(b, []byte("\r\n"))
		if i < 0 {
			out = append(out, b...)
			break
		}
		line, rest := string(b[:i]), b[i+2:]
		data := -1
		f := strings.Split(line, " ")
		switch {
		case f[0] == "VALUE" && (len(f) == 4 || len(f) == 5):
			if sz, err := strconv.Atoi(f[3]); err == nil && sz >= 0 {
				data = sz
				if len(f) == 5 {
					f[4] = n.cas(f[4])
				}
				line = strings.Join(f, " ")
			}
		case f[0] == "VA" && len(f) >= 2:
			if sz, err := strconv.Atoi(f[1]); err == nil && sz >= 0 {
				data = sz
				n.metaFlags(f[2:])
				line = strings.Join(f, " ")
			}
		default:
			line = n.line(line)
		}
		out = append(out, line...)
		out = append(out, "\r\n"...)
		b = rest
		if data >= 0 {
			k := min(data+2, len(b))
			out = append(out, b[:k]...)
			b = b[k:]
		}
	}
	return out
}

func (n *normalizer) metaFlags(f []string) {
	for i, tok := range f {
		if len(tok) < 2 {
			continue
		}
		switch tok[0] {
		case 'c':
			f[i] = "c" + n.cas(tok[1:])
		case 't':
			f[i] = "t" + n.ttl(tok[1:])
		case 'l':
			f[i] = "l" + lastAccess(tok[1:])
		}
	}
}

func (n *normalizer) line(line string) string {
	f := strings.Split(line, " ")
	switch f[0] {
	case "VERSION":
		return "VERSION *"
	case "HD", "NF", "NS", "EX", "EN":
		n.metaFlags(f[1:])
		return strings.Join(f, " ")
	case "ME":
		for i := 2; i < len(f); i++ {
			k, v, ok := strings.Cut(f[i], "=")
			if !ok {
				continue
			}
			switch k {
			case "exp":
				v = n.ttl(v)
			case "la":
				v = lastAccess(v)
			case "cas":
				v = n.cas(v)
			case "cls", "size":
				v = "*"
			}
			f[i] = k + "=" + v
		}
		return strings.Join(f, " ")
	case "ITEM":
		// ITEM <key> [<n> b; <t> s]
		if len(f) == 6 && f[4] != "0" {
			f[4] = "*"
		}
		return strings.Join(f, " ")
	case "STAT":
		if len(f) < 3 {
			return line
		}
		return "STAT " + n.stat(f[1], strings.Join(f[2:], " "))
	}
	return line
}

func (n *normalizer) stat(name, value string) string {
	if rest, ok := strings.CutPrefix(name, "items:"); ok {
		if _, field, ok := strings.Cut(rest, ":"); ok && volatileItemStats[field] {
			value = "*"
		}
		return name + " " + value
	}
	if cls, field, ok := strings.Cut(name, ":"); ok && isDigits(cls) {
		if connStats[field] {
			if field != "state" {
				value = "*"
			}
			return "*:" + field + " " + value
		}
		if volatileSlabStats[field] {
			value = "*"
		}
		return name + " " + value
	}
	if volatileStats[name] || n.sc.vary[name] {
		value = "*"
	}
	return name + " " + value
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
