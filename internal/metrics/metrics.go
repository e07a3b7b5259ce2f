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
package metrics

import (
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
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

// A Set holds the descriptions of the memcached_ metrics and of the
// tables a process adds (Add), and sends metrics for them.
type Set struct {
	descs map[string]*prometheus.Desc // by full name

	up, version, commands, slabCommands *prometheus.Desc
}

// NewSet returns a Set of the memcached_ metrics.
func NewSet() *Set {
	s := &Set{descs: map[string]*prometheus.Desc{}}
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
// labels given (and "lru" for a Stat with Labels).
func (s *Set) Add(ns string, list []Stat, labels ...string) {
	for _, st := range list {
		name := prometheus.BuildFQName(ns, "", st.Name)
		if _, ok := s.descs[name]; ok {
			continue
		}
		ls := labels
		if st.Labels != nil {
			ls = append(append([]string(nil), labels...), "lru")
		}
		s.descs[name] = prometheus.NewDesc(name, st.Help, ls, nil)
	}
}

// Describe sends every description of the Set.
func (s *Set) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range s.descs {
		ch <- d
	}
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

// Table sends the metric of each Stat of list (added under ns) whose stat
// stats has, with the label values given first.
func (s *Set) Table(ch chan<- prometheus.Metric, ns string, list []Stat, stats map[string]string, labels ...string) {
	for _, st := range list {
		v, ok := stats[st.Stat]
		if !ok {
			continue
		}
		f, ok := Value(v)
		if !ok {
			continue
		}
		t := prometheus.CounterValue
		if st.Gauge {
			t = prometheus.GaugeValue
		}
		ch <- prometheus.MustNewConstMetric(s.descs[prometheus.BuildFQName(ns, "", st.Name)], t, f, append(labels, st.Labels...)...)
	}
}

// General sends memcached_up, memcached_version, the General table and
// memcached_commands_total from a "stats" reply (name → value).
func (s *Set) General(ch chan<- prometheus.Metric, stats map[string]string) {
	ch <- prometheus.MustNewConstMetric(s.up, prometheus.GaugeValue, 1)
	ch <- prometheus.MustNewConstMetric(s.version, prometheus.GaugeValue, 1, stats["version"])
	s.Table(ch, "memcached", General, stats)
	num := func(name string) float64 { f, _ := Value(stats[name]); return f }
	for _, op := range commandOps {
		ch <- prometheus.MustNewConstMetric(s.commands, prometheus.CounterValue, num(op+"_hits"), op, "hit")
		ch <- prometheus.MustNewConstMetric(s.commands, prometheus.CounterValue, num(op+"_misses"), op, "miss")
	}
	ch <- prometheus.MustNewConstMetric(s.commands, prometheus.CounterValue, num("cas_badval"), "cas", "badval")
	ch <- prometheus.MustNewConstMetric(s.commands, prometheus.CounterValue, num("cmd_flush"), "flush", "hit")
	// cmd_set counts the cas commands too, as memcached's does.
	ch <- prometheus.MustNewConstMetric(s.commands, prometheus.CounterValue,
		num("cmd_set")-num("cas_hits")-num("cas_misses")-num("cas_badval"), "set", "hit")
}

// Settings sends the LRU crawler's settings from a "stats settings" reply
// when the crawler is on, as the exporter does.
func (s *Set) Settings(ch chan<- prometheus.Metric, settings map[string]string) {
	if settings["lru_crawler"] == "yes" {
		s.Table(ch, "memcached", Settings, settings)
	}
}

// Classes sends the per slab class metrics from "stats items" (lines
// "items:<class>:<stat>") and "stats slabs" ("<class>:<stat>") replies.
func (s *Set) Classes(ch chan<- prometheus.Metric, items, slabs map[string]string) {
	for class, st := range byClass(items, "items:") {
		s.Table(ch, "memcached", Items, st, class)
	}
	for class, st := range byClass(slabs, "") {
		s.Table(ch, "memcached", Slabs, st, class)
		f := func(name string) float64 { v, _ := Value(st[name]); return v }
		for _, op := range commandOps {
			ch <- prometheus.MustNewConstMetric(s.slabCommands, prometheus.CounterValue, f(op+"_hits"), class, op, "hit")
		}
		ch <- prometheus.MustNewConstMetric(s.slabCommands, prometheus.CounterValue, f("cas_badval"), class, "cas", "badval")
		ch <- prometheus.MustNewConstMetric(s.slabCommands, prometheus.CounterValue, f("cmd_set")-f("cas_hits")-f("cas_badval"), class, "set", "hit")
	}
}

// byClass groups "<prefix><class>:<stat>" lines by class.
func byClass(lines map[string]string, prefix string) map[string]map[string]string {
	classes := map[string]map[string]string{}
	for k, v := range lines {
		rest, ok := strings.CutPrefix(k, prefix)
		if !ok {
			continue
		}
		class, stat, ok := strings.Cut(rest, ":")
		if !ok {
			continue
		}
		if classes[class] == nil {
			classes[class] = map[string]string{}
		}
		classes[class][stat] = v
	}
	return classes
}
