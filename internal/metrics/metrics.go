// Package metrics maps memcached's stats onto Prometheus metrics, under
// the names and labels of memcached_exporter (prometheus/memcached_exporter),
// for the vbcache processes that answer "stats": nodes and proxies. A
// process's collector reads its stats at scrape time, as the exporter
// reads a memcached's over the network, and sends them through a Set; so
// dashboards and alerts made for the exporter work unchanged, and a metric
// never disagrees with the stat it comes from. Where the exporter's choice
// fails Prometheus's metric lint (promtool check metrics), the lint wins:
// the uptime and the last eviction's age are gauges, and the three
// per-slab LRU move counters end in _total (the exporter's lack it).
//
// A scrape reads a node's stats again and again, and a node with items in
// many slab classes has hundreds of series; so what can be kept between
// scrapes is kept. Lines keeps the names of a stats reply's lines and
// parses their values in place; a Set keeps each series' label pairs,
// made the first time the series is sent (as client_golang's own metric
// vectors keep theirs), and forgets a series not sent for a while. What a
// scrape still allocates is what the registry needs per metric to gather
// and encode it (BenchmarkScrape in internal/server measures it).
package metrics

import (
	"bytes"
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// A Stat maps one stat onto one metric.
type Stat struct {
	Stat   string // the stat's name ("bytes_read"; "evicted" in an items or slabs line)
	Name   string // the metric's name, without the namespace
	Help   string
	Gauge  bool     // a gauge; else a counter
	Labels []string // label values after the per-class ones, of a metric several stats share
}

// General are memcached_exporter's from "stats".
var General = []Stat{
	{Stat: "uptime", Name: "uptime_seconds", Help: "Number of seconds since the server started.", Gauge: true},
	{Stat: "time", Name: "time_seconds", Help: "Current UNIX time according to the server.", Gauge: true},
	{Stat: "rusage_user", Name: "process_user_cpu_seconds_total", Help: "Accumulated user time for this process."},
	{Stat: "rusage_system", Name: "process_system_cpu_seconds_total", Help: "Accumulated system time for this process."},
	{Stat: "bytes_read", Name: "read_bytes_total", Help: "Total number of bytes read by this server from network."},
	{Stat: "bytes_written", Name: "written_bytes_total", Help: "Total number of bytes sent by this server to network."},
	{Stat: "curr_connections", Name: "current_connections", Help: "Current number of open connections.", Gauge: true},
	{Stat: "max_connections", Name: "max_connections", Help: "Maximum number of clients allowed.", Gauge: true},
	{Stat: "total_connections", Name: "connections_total", Help: "Total number of connections opened since the server started running."},
	{Stat: "rejected_connections", Name: "connections_rejected_total", Help: "Total number of connections rejected due to hitting the -c limit in maxconns_fast mode."},
	{Stat: "conn_yields", Name: "connections_yielded_total", Help: "Total number of connections yielded running due to hitting the -R limit."},
	{Stat: "listen_disabled_num", Name: "connections_listener_disabled_total", Help: "Number of times that the server has hit its connections limit and disabled its listener."},
	{Stat: "bytes", Name: "current_bytes", Help: "Current number of bytes used to store items.", Gauge: true},
	{Stat: "limit_maxbytes", Name: "limit_bytes", Help: "Number of bytes this server is allowed to use for storage.", Gauge: true},
	{Stat: "curr_items", Name: "current_items", Help: "Current number of items stored by this instance.", Gauge: true},
	{Stat: "total_items", Name: "items_total", Help: "Total number of items stored during the life of this instance."},
	{Stat: "evictions", Name: "items_evicted_total", Help: "Total number of valid items removed from cache to free memory for new items."},
	{Stat: "reclaimed", Name: "items_reclaimed_total", Help: "Total number of times an entry was stored using memory from an expired entry."},
	{Stat: "store_too_large", Name: "item_too_large_total", Help: "The number of times an item exceeded the max-item-size when being stored."},
	{Stat: "store_no_memory", Name: "item_no_memory_total", Help: "The number of times an item could not be stored due to no more memory."},
	{Stat: "direct_reclaims", Name: "direct_reclaims_total", Help: "Times worker threads had to directly reclaim or evict items."},
	{Stat: "lru_crawler_starts", Name: "lru_crawler_starts_total", Help: "Times an LRU crawler was started."},
	{Stat: "crawler_reclaimed", Name: "lru_crawler_reclaimed_total", Help: "Total items freed by LRU Crawler."},
	{Stat: "crawler_items_checked", Name: "lru_crawler_items_checked_total", Help: "Total items examined by LRU Crawler."},
	{Stat: "moves_to_cold", Name: "lru_crawler_moves_to_cold_total", Help: "Total number of items moved from HOT/WARM to COLD LRU's."},
	{Stat: "moves_to_warm", Name: "lru_crawler_moves_to_warm_total", Help: "Total number of items moved from COLD to WARM LRU."},
	{Stat: "moves_within_lru", Name: "lru_crawler_moves_within_lru_total", Help: "Total number of items reshuffled within HOT or WARM LRU's."},
	{Stat: "total_malloced", Name: "malloced_bytes", Help: "Number of bytes of memory allocated to slab pages.", Gauge: true},
	{Stat: "accepting_conns", Name: "accepting_connections", Help: "The server is currently accepting new connections.", Gauge: true},
}

// Settings are memcached_exporter's from "stats settings"; the
// LRU crawler's only when it is on, as the exporter does.
var Settings = []Stat{
	{Stat: "lru_crawler", Name: "lru_crawler_enabled", Help: "Whether the LRU crawler is enabled.", Gauge: true},
	{Stat: "lru_crawler_sleep", Name: "lru_crawler_sleep", Help: "Microseconds to sleep between LRU crawls.", Gauge: true},
	{Stat: "lru_crawler_tocrawl", Name: "lru_crawler_to_crawl", Help: "Max items to crawl per slab per run.", Gauge: true},
	{Stat: "lru_maintainer_thread", Name: "lru_crawler_maintainer_thread", Help: "Split LRU mode and background threads.", Gauge: true},
	{Stat: "hot_lru_pct", Name: "lru_crawler_hot_percent", Help: "Percent of slab memory reserved for HOT LRU.", Gauge: true},
	{Stat: "warm_lru_pct", Name: "lru_crawler_warm_percent", Help: "Percent of slab memory reserved for WARM LRU.", Gauge: true},
	{Stat: "hot_max_factor", Name: "lru_crawler_hot_max_factor", Help: "Set idle age of HOT LRU to COLD age * this", Gauge: true},
	{Stat: "warm_max_factor", Name: "lru_crawler_warm_max_factor", Help: "Set idle age of WARM LRU to COLD age * this", Gauge: true},
}

// Items are memcached_exporter's per slab class from "stats items"
// (label slab).
var Items = []Stat{
	{Stat: "number", Name: "slab_current_items", Help: "Number of items currently stored in this slab class.", Gauge: true},
	{Stat: "age", Name: "slab_items_age_seconds", Help: "Number of seconds the oldest item has been in the slab class.", Gauge: true},
	{Stat: "number_hot", Name: "slab_hot_items", Help: "Number of items presently stored in the HOT LRU.", Gauge: true},
	{Stat: "number_warm", Name: "slab_warm_items", Help: "Number of items presently stored in the WARM LRU.", Gauge: true},
	{Stat: "number_cold", Name: "slab_cold_items", Help: "Number of items presently stored in the COLD LRU.", Gauge: true},
	{Stat: "age_hot", Name: "slab_hot_age_seconds", Help: "Age of the oldest item in HOT LRU.", Gauge: true},
	{Stat: "age_warm", Name: "slab_warm_age_seconds", Help: "Age of the oldest item in WARM LRU.", Gauge: true},
	{Stat: "crawler_reclaimed", Name: "slab_items_crawler_reclaimed_total", Help: "Number of items freed by the LRU Crawler."},
	{Stat: "evicted", Name: "slab_items_evicted_total", Help: "Total number of times an item had to be evicted from the LRU before it expired."},
	{Stat: "evicted_nonzero", Name: "slab_items_evicted_nonzero_total", Help: "Total number of times an item which had an explicit expire time set had to be evicted from the LRU before it expired."},
	{Stat: "evicted_time", Name: "slab_items_evicted_time_seconds", Help: "Seconds since the last access for the most recent item evicted from this class.", Gauge: true},
	{Stat: "evicted_unfetched", Name: "slab_items_evicted_unfetched_total", Help: "Total number of items evicted and never fetched."},
	{Stat: "expired_unfetched", Name: "slab_items_expired_unfetched_total", Help: "Total number of valid items evicted from the LRU which were never touched after being set."},
	{Stat: "outofmemory", Name: "slab_items_outofmemory_total", Help: "Total number of items for this slab class that have triggered an out of memory error."},
	{Stat: "reclaimed", Name: "slab_items_reclaimed_total", Help: "Total number of items reclaimed."},
	{Stat: "tailrepairs", Name: "slab_items_tailrepairs_total", Help: "Total number of times the entries for a particular ID need repairing."},
	{Stat: "mem_requested", Name: "slab_mem_requested_bytes", Help: "Number of bytes of memory actual items take up within a slab.", Gauge: true},
	{Stat: "moves_to_cold", Name: "slab_items_moves_to_cold_total", Help: "Number of items moved from HOT or WARM into COLD."},
	{Stat: "moves_to_warm", Name: "slab_items_moves_to_warm_total", Help: "Number of items moves from COLD into WARM."},
	{Stat: "moves_within_lru", Name: "slab_items_moves_within_lru_total", Help: "Number of times active items were bumped within HOT or WARM."},
	{Stat: "hits_to_hot", Name: "slab_lru_hits_total", Help: "Number of get_hits to the LRU.", Labels: []string{"hot"}},
	{Stat: "hits_to_warm", Name: "slab_lru_hits_total", Labels: []string{"warm"}},
	{Stat: "hits_to_cold", Name: "slab_lru_hits_total", Labels: []string{"cold"}},
	{Stat: "hits_to_temp", Name: "slab_lru_hits_total", Labels: []string{"temporary"}},
}

// Slabs are memcached_exporter's per slab class from "stats slabs".
var Slabs = []Stat{
	{Stat: "chunk_size", Name: "slab_chunk_size_bytes", Help: "Number of bytes allocated to each chunk within this slab class.", Gauge: true},
	{Stat: "chunks_per_page", Name: "slab_chunks_per_page", Help: "Number of chunks within a single page for this slab class.", Gauge: true},
	{Stat: "total_pages", Name: "slab_current_pages", Help: "Number of pages allocated to this slab class.", Gauge: true},
	{Stat: "total_chunks", Name: "slab_current_chunks", Help: "Number of chunks allocated to this slab class.", Gauge: true},
	{Stat: "used_chunks", Name: "slab_chunks_used", Help: "Number of chunks allocated to an item.", Gauge: true},
	{Stat: "free_chunks", Name: "slab_chunks_free", Help: "Number of chunks not yet allocated items.", Gauge: true},
	{Stat: "free_chunks_end", Name: "slab_chunks_free_end", Help: "Number of free chunks at the end of the last allocated page.", Gauge: true},
}

// commandOps are the commands of memcached_commands_total with hit and
// miss statuses (<op>_hits, <op>_misses).
var commandOps = []string{"get", "delete", "incr", "decr", "cas", "touch"}

// Stats is what a collector read from a stats reply: a stat's value by
// name, ok=false for a stat the reply did not have or that is not a number.
type Stats interface {
	Get(name string) (float64, bool)
}

// Map is Stats over stat lines already split into name → text.
type Map map[string]string

// Get parses the named stat's text with Value.
func (m Map) Get(name string) (float64, bool) {
	v, ok := m[name]
	if !ok {
		return 0, false
	}
	return Value(v)
}

// Lines is Stats parsed from a stats reply ("STAT <name> <value>\r\n"
// lines), for a collector that parses the same command's reply at every
// scrape: the names are kept from one Parse to the next, so parsing
// allocates only for a name not seen before. Only the last Parse's lines
// are present. A Lines is not safe for concurrent use.
type Lines struct {
	index map[string]int // name → its slot in vals and names
	names []string
	vals  []lineValue
	gen   uint32          // Parse's count; a slot whose gen differs is absent
	key   []byte          // scratch for names built by Set.Classes
	seen  map[string]bool // scratch: the classes Set.Classes found
}

type lineValue struct {
	v   float64
	ok  bool // the value is a number (Value)
	gen uint32
}

// Parse reads reply's STAT lines, replacing what an earlier Parse read.
func (l *Lines) Parse(reply []byte) {
	if l.index == nil {
		l.index = map[string]int{}
	}
	l.gen++
	for len(reply) > 0 {
		line := reply
		if i := bytes.IndexByte(reply, '\n'); i >= 0 {
			line, reply = reply[:i], reply[i+1:]
		} else {
			reply = nil
		}
		line = bytes.TrimSuffix(line, []byte("\r"))
		rest, ok := bytes.CutPrefix(line, []byte("STAT "))
		if !ok {
			continue
		}
		name, value, ok := bytes.Cut(rest, []byte(" "))
		if !ok {
			continue
		}
		i, ok := l.index[string(name)]
		if !ok {
			i = len(l.names)
			l.names = append(l.names, string(name))
			l.vals = append(l.vals, lineValue{})
			l.index[l.names[i]] = i
		}
		v, isNum := value2(value)
		l.vals[i] = lineValue{v: v, ok: isNum, gen: l.gen}
	}
}

// Get returns the value of the named line of the last Parse.
func (l *Lines) Get(name string) (float64, bool) {
	i, ok := l.index[name]
	if !ok || l.vals[i].gen != l.gen {
		return 0, false
	}
	return l.vals[i].v, l.vals[i].ok
}

func (l *Lines) getBytes(name []byte) (float64, bool) {
	i, ok := l.index[string(name)]
	if !ok || l.vals[i].gen != l.gen {
		return 0, false
	}
	return l.vals[i].v, l.vals[i].ok
}

// Value parses a stat as a number: an integer, a float, a "sec.usec"
// rusage, or yes/no; ok=false for anything else.
func Value(v string) (float64, bool) {
	switch v {
	case "yes":
		return 1, true
	case "no":
		return 0, true
	}
	f, err := strconv.ParseFloat(v, 64)
	return f, err == nil
}

// value2 is Value of a line's bytes (strconv does not keep its argument,
// so the conversion does not allocate).
func value2(v []byte) (float64, bool) {
	switch string(v) {
	case "yes":
		return 1, true
	case "no":
		return 0, true
	}
	f, err := strconv.ParseFloat(string(v), 64)
	return f, err == nil
}

// A Set holds the descriptions of the memcached_ metrics and of the
// tables a process adds (Add), and sends metrics for them.
type Set struct {
	descs  map[string]*prometheus.Desc  // by full name; written by NewSet and Add only
	byStat map[statKey]*prometheus.Desc // the same, by namespace and Stat.Name

	up, version, commands, slabCommands *prometheus.Desc

	mu      sync.Mutex // protects series and scrapes
	series  map[seriesKey]*series
	scrapes uint64 // Begin's count
}

type statKey struct{ ns, name string }

// seriesKey names a series: its description and up to three label values
// (the most any metric here has).
type seriesKey struct {
	desc       *prometheus.Desc
	l0, l1, l2 string
}

// series is one labelled series of a Set. Its label pairs are read, never
// written, by the registries that gather it, concurrently if need be.
type series struct {
	desc   *prometheus.Desc
	labels []*dto.LabelPair
	seen   uint64 // the scrape that last sent it (Set.mu)
}

// forgetAfter is how many scrapes a series may go unsent before a Set
// forgets its label pairs (a peer or server gone, a class emptied).
const forgetAfter = 16

// sample is a series' value at one scrape.
type sample struct {
	s *series
	t prometheus.ValueType
	v float64
}

func (m *sample) Desc() *prometheus.Desc { return m.s.desc }

func (m *sample) Write(out *dto.Metric) error {
	out.Label = m.s.labels
	switch m.t {
	case prometheus.CounterValue:
		out.Counter = &dto.Counter{Value: &m.v}
	default:
		out.Gauge = &dto.Gauge{Value: &m.v}
	}
	return nil
}

// NewSet returns a Set of the memcached_ metrics.
func NewSet() *Set {
	s := &Set{descs: map[string]*prometheus.Desc{}, byStat: map[statKey]*prometheus.Desc{}, series: map[seriesKey]*series{}}
	s.Add("memcached", General)
	s.Add("memcached", Settings)
	s.Add("memcached", Items, "slab")
	s.Add("memcached", Slabs, "slab")
	s.up = prometheus.NewDesc("memcached_up", "Could the memcached server be reached.", nil, nil)
	s.version = prometheus.NewDesc("memcached_version", "The version of this memcached server.", []string{"version"}, nil)
	s.commands = prometheus.NewDesc("memcached_commands_total", "Total number of all requests broken down by command (get, set, etc.) and status.", []string{"command", "status"}, nil)
	s.slabCommands = prometheus.NewDesc("memcached_slab_commands_total", "Total number of all requests broken down by command (get, set, etc.) and status per slab.", []string{"slab", "command", "status"}, nil)
	s.descs["memcached_up"], s.descs["memcached_version"] = s.up, s.version
	s.descs["memcached_commands_total"], s.descs["memcached_slab_commands_total"] = s.commands, s.slabCommands
	return s
}

// Add describes the metrics of list under namespace ns, each with the
// labels given (and "lru" for a Stat with Labels). Add is for setting up:
// call it before the Set's first scrape.
func (s *Set) Add(ns string, list []Stat, labels ...string) {
	for _, st := range list {
		name := prometheus.BuildFQName(ns, "", st.Name)
		if d, ok := s.descs[name]; ok {
			s.byStat[statKey{ns, st.Name}] = d
			continue
		}
		ls := labels
		if st.Labels != nil {
			ls = append(append([]string(nil), labels...), "lru")
		}
		s.descs[name] = prometheus.NewDesc(name, st.Help, ls, nil)
		s.byStat[statKey{ns, st.Name}] = s.descs[name]
	}
}

// Describe sends every description of the Set.
func (s *Set) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range s.descs {
		ch <- d
	}
}

// Begin starts a scrape: a collector calls it first in Collect. Every
// forgetAfter scrapes the series not sent in that many are forgotten.
func (s *Set) Begin() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.scrapes++
	if s.scrapes%forgetAfter != 0 {
		return
	}
	for k, sr := range s.series {
		if s.scrapes-sr.seen > forgetAfter {
			delete(s.series, k)
		}
	}
}

// Send sends one metric of desc (which has up to three variable labels,
// given in order) with value v, as a counter or a gauge.
func (s *Set) Send(ch chan<- prometheus.Metric, desc *prometheus.Desc, t prometheus.ValueType, v float64, labels ...string) {
	k := seriesKey{desc: desc}
	switch len(labels) {
	case 3:
		k.l2 = labels[2]
		fallthrough
	case 2:
		k.l1 = labels[1]
		fallthrough
	case 1:
		k.l0 = labels[0]
	case 0:
	default:
		ch <- prometheus.MustNewConstMetric(desc, t, v, labels...)
		return
	}
	s.mu.Lock()
	sr := s.series[k]
	if sr == nil {
		// The first scrape that sends it checks the labels against the
		// description (as prometheus.NewConstMetric does) and makes them.
		if _, err := prometheus.NewConstMetric(desc, t, v, labels...); err != nil {
			s.mu.Unlock()
			ch <- prometheus.NewInvalidMetric(desc, err)
			return
		}
		// The key's strings may be parts of longer ones (a stats
		// reply's names); copy them so the map keeps only themselves.
		k.l0, k.l1, k.l2 = clone(k.l0), clone(k.l1), clone(k.l2)
		sr = &series{desc: desc, labels: prometheus.MakeLabelPairs(desc, labels)}
		s.series[k] = sr
	}
	sr.seen = s.scrapes
	s.mu.Unlock()
	ch <- &sample{s: sr, t: t, v: v}
}

func clone(s string) string {
	if s == "" {
		return ""
	}
	return string(append([]byte(nil), s...))
}

// Table sends the metric of each Stat of list (added under ns) that stats
// has, with the label values given first.
func (s *Set) Table(ch chan<- prometheus.Metric, ns string, list []Stat, stats Stats, labels ...string) {
	var all [4]string
	for _, st := range list {
		v, ok := stats.Get(st.Stat)
		if !ok {
			continue
		}
		s.sendStat(ch, ns, st, v, append(append(all[:0], labels...), st.Labels...))
	}
}

func (s *Set) sendStat(ch chan<- prometheus.Metric, ns string, st Stat, v float64, labels []string) {
	t := prometheus.CounterValue
	if st.Gauge {
		t = prometheus.GaugeValue
	}
	s.Send(ch, s.desc(ns, st), t, v, labels...)
}

// desc returns the description Add made of st under ns.
func (s *Set) desc(ns string, st Stat) *prometheus.Desc {
	return s.byStat[statKey{ns, st.Name}]
}

// General sends memcached_up, memcached_version, the General table and
// memcached_commands_total from a "stats" reply.
func (s *Set) General(ch chan<- prometheus.Metric, stats Stats, version string) {
	s.Send(ch, s.up, prometheus.GaugeValue, 1)
	s.Send(ch, s.version, prometheus.GaugeValue, 1, version)
	s.Table(ch, "memcached", General, stats)
	num := func(name string) float64 { f, _ := stats.Get(name); return f }
	for _, op := range commandOps {
		s.Send(ch, s.commands, prometheus.CounterValue, num(op+"_hits"), op, "hit")
		s.Send(ch, s.commands, prometheus.CounterValue, num(op+"_misses"), op, "miss")
	}
	s.Send(ch, s.commands, prometheus.CounterValue, num("cas_badval"), "cas", "badval")
	s.Send(ch, s.commands, prometheus.CounterValue, num("cmd_flush"), "flush", "hit")
	// cmd_set counts the cas commands too, as memcached's does.
	s.Send(ch, s.commands, prometheus.CounterValue,
		num("cmd_set")-num("cas_hits")-num("cas_misses")-num("cas_badval"), "set", "hit")
}

// Settings sends the LRU crawler's settings from a "stats settings" reply
// when the crawler is on, as the exporter does.
func (s *Set) Settings(ch chan<- prometheus.Metric, settings Stats) {
	if on, _ := settings.Get("lru_crawler"); on == 1 {
		s.Table(ch, "memcached", Settings, settings)
	}
}

// Classes sends the per slab class metrics from "stats items" (lines
// "items:<class>:<stat>") and "stats slabs" ("<class>:<stat>") replies.
func (s *Set) Classes(ch chan<- prometheus.Metric, items, slabs *Lines) {
	s.classTable(ch, items, "items:", Items, nil)
	s.classTable(ch, slabs, "", Slabs, func(class string, get func(string) float64) {
		for _, op := range commandOps {
			s.Send(ch, s.slabCommands, prometheus.CounterValue, get(op+"_hits"), class, op, "hit")
		}
		s.Send(ch, s.slabCommands, prometheus.CounterValue, get("cas_badval"), class, "cas", "badval")
		s.Send(ch, s.slabCommands, prometheus.CounterValue, get("cmd_set")-get("cas_hits")-get("cas_badval"), class, "set", "hit")
	})
}

// classTable sends list for every class that has a line
// "<prefix><class>:<stat>" in l, then calls more for it (if not nil) with
// a getter of that class's stats.
func (s *Set) classTable(ch chan<- prometheus.Metric, l *Lines, prefix string, list []Stat, more func(class string, get func(string) float64)) {
	stat := func(class, name string) (float64, bool) {
		l.key = append(append(append(append(l.key[:0], prefix...), class...), ':'), name...)
		return l.getBytes(l.key)
	}
	get := func(class string) func(string) float64 {
		return func(name string) float64 { v, _ := stat(class, name); return v }
	}
	if l.seen == nil {
		l.seen = map[string]bool{}
	}
	clear(l.seen)
	for i, name := range l.names {
		if l.vals[i].gen != l.gen || len(name) <= len(prefix) || name[:len(prefix)] != prefix {
			continue
		}
		rest := name[len(prefix):]
		j := indexByte(rest, ':')
		if j <= 0 {
			continue
		}
		class := rest[:j]
		if l.seen[class] {
			continue
		}
		l.seen[class] = true
		var all [2]string
		for _, st := range list {
			if v, ok := stat(class, st.Stat); ok {
				s.sendStat(ch, "memcached", st, v, append(append(all[:0], class), st.Labels...))
			}
		}
		if more != nil {
			more(class, get(class))
		}
	}
}

func indexByte(s string, c byte) int {
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			return i
		}
	}
	return -1
}
