package placement

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"strings"

	"github.com/vbcache/vbcache/memcache"
)

// RehashConfig describes one run of the rehash experiment. Zero values
// mean the classic run: keys a–z on node1..node3, node4 added, 100000
// random keys, every distribution.
type RehashConfig struct {
	Keys          []string // the keys shown one by one; default a..z
	Servers       []string // before, "host[:port][:weight]"; default node1..node3
	Add           []string // servers added; default node4
	RandomKeys    int      // size of the random key set; 0 means 100000, <0 none
	Seed          uint64   // for the random keys
	Distributions []string // default: all but modulo-python (same as modulo here)
	VBuckets      int      // vbucket count; 0 means 1024
}

func (c *RehashConfig) setDefaults() {
	if len(c.Keys) == 0 {
		for r := 'a'; r <= 'z'; r++ {
			c.Keys = append(c.Keys, string(r))
		}
	}
	if len(c.Servers) == 0 {
		c.Servers = []string{"node1", "node2", "node3"}
	}
	if len(c.Add) == 0 {
		c.Add = []string{"node4"}
	}
	if c.RandomKeys == 0 {
		c.RandomKeys = 100000
	}
	if len(c.Distributions) == 0 {
		c.Distributions = []string{"modulo", "modulo-crc32", "modulo-oaat", "ketama", "ketama-spy", "vbucket"}
	}
	if c.VBuckets == 0 {
		c.VBuckets = 1024
	}
}

// RehashReport is the experiment's outcome.
type RehashReport struct {
	Before     []string       `json:"before"`
	After      []string       `json:"after"`
	Keys       []string       `json:"keys"`
	RandomKeys int            `json:"randomKeys"`
	Results    []RehashResult `json:"results"`
}

// RehashResult is one distribution's outcome.
type RehashResult struct {
	Distribution string `json:"distribution"`
	// Mode is set for vbucket: "remap" (the map changes, no data moves:
	// keys of moved vbuckets miss) or "move" (vbuckets move with their
	// data: every key still hits).
	Mode      string    `json:"mode,omitempty"`
	Moves     []KeyMove `json:"moves"`
	Kept      int       `json:"kept"`    // of Keys, on the same server
	HitRate   float64   `json:"hitRate"` // of Keys, found after the change
	RandKept  int       `json:"randomKept"`
	RandHit   float64   `json:"randomHitRate"`
	Theory    float64   `json:"theory"`    // expected share of keys kept
	TheoryFor string    `json:"theoryFor"` // the formula
}

// KeyMove is one key's server before and after.
type KeyMove struct {
	Key    string `json:"key"`
	Before string `json:"before"`
	After  string `json:"after"`
}

// Rehash runs the experiment.
func Rehash(cfg RehashConfig) (*RehashReport, error) {
	cfg.setDefaults()
	before, err := memcache.ParseServers(strings.Join(cfg.Servers, ","))
	if err != nil {
		return nil, err
	}
	added, err := memcache.ParseServers(strings.Join(cfg.Add, ","))
	if err != nil {
		return nil, err
	}
	after := append(append([]memcache.Server(nil), before...), added...)
	rep := &RehashReport{Before: names(before), After: names(after), Keys: cfg.Keys}
	var random []string
	if cfg.RandomKeys > 0 {
		r := rand.New(rand.NewPCG(cfg.Seed, 0x5eed))
		random = make([]string, cfg.RandomKeys)
		for i := range random {
			random[i] = "key:" + strconv.FormatUint(r.Uint64(), 36)
		}
		rep.RandomKeys = len(random)
	}
	for _, d := range cfg.Distributions {
		if d == "vbucket" {
			res, err := rehashVBucket(cfg, before, after, random)
			if err != nil {
				return nil, err
			}
			rep.Results = append(rep.Results, res...)
			continue
		}
		opts := &memcache.Options{VBuckets: cfg.VBuckets}
		s1, err := memcache.NewSelector(d, before, opts)
		if err != nil {
			return nil, err
		}
		s2, err := memcache.NewSelector(d, after, opts)
		if err != nil {
			return nil, err
		}
		res := RehashResult{Distribution: d}
		pick := func(s memcache.ServerSelector, k string) string {
			a, err := s.PickServer(k)
			if err != nil {
				return "-"
			}
			return display(a.String())
		}
		for _, k := range cfg.Keys {
			m := KeyMove{k, pick(s1, k), pick(s2, k)}
			res.Moves = append(res.Moves, m)
			if m.Before == m.After {
				res.Kept++
			}
		}
		res.HitRate = float64(res.Kept) / float64(len(cfg.Keys))
		for _, k := range random {
			if pick(s1, k) == pick(s2, k) {
				res.RandKept++
			}
		}
		if len(random) > 0 {
			res.RandHit = float64(res.RandKept) / float64(len(random))
		}
		res.Theory, res.TheoryFor = theory(d, before, after)
		rep.Results = append(rep.Results, res)
	}
	return rep, nil
}

// theory is the expected share of keys that stay.
func theory(d string, before, after []memcache.Server) (float64, string) {
	wb, wa := totalWeight(before), totalWeight(after)
	switch d {
	case "modulo", "modulo-python", "modulo-crc32":
		return moduloKept(wb, wa), fmt.Sprintf("h%%%d == h%%%d", wb, wa)
	case "modulo-oaat": // libmemcached ignores weights
		return moduloKept(len(before), len(after)), fmt.Sprintf("h%%%d == h%%%d", len(before), len(after))
	}
	return float64(wb) / float64(wa), fmt.Sprintf("%d/%d", wb, wa)
}

// moduloKept is the share of hash values h with h%a == h%b, for a uniform
// hash: exact over one period lcm(a, b).
func moduloKept(a, b int) float64 {
	l := a / gcd(a, b) * b
	n := 0
	for h := 0; h < l; h++ {
		if h%a == h%b {
			n++
		}
	}
	return float64(n) / float64(l)
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

func totalWeight(s []memcache.Server) int {
	n := 0
	for _, x := range s {
		n += max(1, x.Weight)
	}
	return n
}

// rehashVBucket places keys through a vbucket map. Before: vbucket i on
// server i % n. After: the fewest vbuckets move so that every server holds
// its share. "remap": the map changes but no data moves, so keys of moved
// vbuckets miss; "move": the vbuckets move with their data, so every key
// still hits.
func rehashVBucket(cfg RehashConfig, before, after []memcache.Server, random []string) ([]RehashResult, error) {
	nvb := cfg.VBuckets
	oldMap := make([]int, nvb)
	for i := range oldMap {
		oldMap[i] = i % len(before)
	}
	newMap := Rebalance(oldMap, len(after))
	an := names(after)
	sel, err := memcache.NewVBucket(an, nvb)
	if err != nil {
		return nil, err
	}
	moved := 0
	for i := range oldMap {
		if oldMap[i] != newMap[i] {
			moved++
		}
	}
	remap := RehashResult{Distribution: "vbucket", Mode: "remap", Theory: float64(len(before)) / float64(len(after)),
		TheoryFor: fmt.Sprintf("%d/%d (%d of %d vbuckets move)", len(before), len(after), moved, nvb)}
	move := RehashResult{Distribution: "vbucket", Mode: "move", Theory: 1, TheoryFor: "every key hits (data moves with its vbucket)"}
	for _, k := range cfg.Keys {
		vb := sel.VBucketOf(k)
		m := KeyMove{k, an[oldMap[vb]], an[newMap[vb]]}
		remap.Moves = append(remap.Moves, m)
		move.Moves = append(move.Moves, m)
		if m.Before == m.After {
			remap.Kept++
			move.Kept++
		}
	}
	remap.HitRate = float64(remap.Kept) / float64(len(cfg.Keys))
	move.HitRate = 1
	for _, k := range random {
		if vb := sel.VBucketOf(k); oldMap[vb] == newMap[vb] {
			remap.RandKept++
			move.RandKept++
		}
	}
	if len(random) > 0 {
		remap.RandHit = float64(remap.RandKept) / float64(len(random))
		move.RandHit = 1
	}
	return []RehashResult{remap, move}, nil
}

// Rebalance returns a new vbucket→server map over n servers that moves the
// fewest vbuckets from old: servers above their share give vbuckets, in
// vbucket order, to servers below it. Shares differ by at most one.
func Rebalance(old []int, n int) []int {
	nvb := len(old)
	target := make([]int, n)
	for i := range target {
		target[i] = nvb / n
		if i < nvb%n {
			target[i]++
		}
	}
	count := make([]int, n)
	for _, s := range old {
		count[s]++
	}
	out := append([]int(nil), old...)
	to := 0
	for vb, s := range out {
		if count[s] <= target[s] {
			continue
		}
		for to < n && count[to] >= target[to] {
			to++
		}
		if to == n {
			break
		}
		count[s]--
		count[to]++
		out[vb] = to
	}
	return out
}

func names(s []memcache.Server) []string {
	var out []string
	for _, x := range s {
		out = append(out, display(x.Addr))
	}
	return out
}

// display drops the default port.
func display(addr string) string { return strings.TrimSuffix(addr, ":11211") }

// WriteJSON writes the report as indented JSON.
func (r *RehashReport) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteText writes the report for people: the summary table, then each
// key's server before and after under every distribution.
func (r *RehashReport) WriteText(w io.Writer) error {
	fmt.Fprintf(w, "Rehash experiment: %d keys on %s, then %s added.\n\n",
		len(r.Keys), strings.Join(r.Before, ","), strings.Join(r.After[len(r.Before):], ","))
	fmt.Fprintf(w, "%-22s %10s %9s", "distribution", "keys kept", "hit rate")
	if r.RandomKeys > 0 {
		fmt.Fprintf(w, " %14s", fmt.Sprintf("%d random", r.RandomKeys))
	}
	fmt.Fprintf(w, " %9s  %s\n", "theory", "")
	for _, res := range r.Results {
		name := res.Distribution
		if res.Mode != "" {
			name += " (" + res.Mode + ")"
		}
		fmt.Fprintf(w, "%-22s %10s %8.1f%%", name, fmt.Sprintf("%d/%d", res.Kept, len(r.Keys)), 100*res.HitRate)
		if r.RandomKeys > 0 {
			fmt.Fprintf(w, " %13.1f%%", 100*res.RandHit)
		}
		fmt.Fprintf(w, " %8.1f%%  %s\n", 100*res.Theory, res.TheoryFor)
	}
	fmt.Fprintf(w, "\nHit rate: share of keys still found on the server that holds them after the change\n"+
		"(no data moves, except vbucket (move), where vbuckets move with their data).\n\n")
	// Per key.
	fmt.Fprintf(w, "%-6s", "key")
	for _, res := range r.Results {
		if res.Mode == "move" {
			continue // same placement as remap
		}
		fmt.Fprintf(w, " %-15s", res.Distribution)
	}
	fmt.Fprintln(w)
	for i, k := range r.Keys {
		if len(k) > 6 {
			k = k[:5] + "…"
		}
		fmt.Fprintf(w, "%-6s", k)
		for _, res := range r.Results {
			if res.Mode == "move" {
				continue
			}
			m := res.Moves[i]
			cell := m.Before + " stays"
			if m.Before != m.After {
				cell = m.Before + "→" + m.After
			}
			fmt.Fprintf(w, " %-15s", cell)
		}
		fmt.Fprintln(w)
	}
	return nil
}
