package placement

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/vbcache/vbcache/memcache"
)

func TestRehashDefault(t *testing.T) {
	rep, err := Rehash(RehashConfig{RandomKeys: 20000})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]RehashResult{}
	for _, r := range rep.Results {
		got[r.Distribution+r.Mode] = r
	}
	for _, d := range []string{"modulo", "modulo-crc32", "modulo-oaat"} {
		r := got[d]
		if r.Kept > 10 {
			t.Errorf("%s kept %d of 26; modulo keeps a handful", d, r.Kept)
		}
		if r.Theory != 0.25 || r.RandHit < 0.23 || r.RandHit > 0.27 {
			t.Errorf("%s: theory %v, random hit rate %v (want about 1/4)", d, r.Theory, r.RandHit)
		}
	}
	for _, d := range []string{"ketama", "ketama-spy", "vbucketremap"} {
		r := got[d]
		if r.Theory != 0.75 || r.RandHit < 0.70 || r.RandHit > 0.80 {
			t.Errorf("%s: theory %v, random hit rate %v (want about 3/4)", d, r.Theory, r.RandHit)
		}
		// Consistent hashing: a key that moves, moves to the new server.
		for _, m := range r.Moves {
			if m.Before != m.After && m.After != "node4" {
				t.Errorf("%s: %s moved %s→%s, not to the new server", d, m.Key, m.Before, m.After)
			}
		}
	}
	if r := got["vbucketmove"]; r.HitRate != 1 || r.RandHit != 1 {
		t.Errorf("vbucket with data moves: hit rate %v/%v, want 1", r.HitRate, r.RandHit)
	}
	var text bytes.Buffer
	if err := rep.WriteText(&text); err != nil || !strings.Contains(text.String(), "vbucket (move)") {
		t.Fatalf("text: %v\n%s", err, text.String())
	}
	var js bytes.Buffer
	if err := rep.WriteJSON(&js); err != nil || !json.Valid(js.Bytes()) {
		t.Fatalf("json: %v", err)
	}
}

func TestModuloTheory(t *testing.T) {
	for _, c := range []struct {
		a, b int
		want float64
	}{{3, 4, 0.25}, {4, 5, 0.2}, {2, 4, 0.5}} {
		if got := moduloKept(c.a, c.b); got != c.want {
			t.Errorf("moduloKept(%d,%d) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
}

func TestRebalanceMovesFewest(t *testing.T) {
	old := make([]int, 1024)
	for i := range old {
		old[i] = i % 3
	}
	nw := Rebalance(old, 4)
	count := make([]int, 4)
	moved := 0
	for i := range nw {
		count[nw[i]]++
		if nw[i] != old[i] {
			moved++
			if nw[i] != 3 {
				t.Fatalf("vbucket %d moved between old servers", i)
			}
		}
	}
	if moved != 256 || count[3] != 256 {
		t.Fatalf("moved %d, counts %v", moved, count)
	}
}

func TestLocate(t *testing.T) {
	sel, _ := memcache.NewSelector("vbucket", []memcache.Server{{Addr: "a:11211"}, {Addr: "b:11211"}}, nil)
	var out bytes.Buffer
	if err := Locate(&out, sel, []string{"hello", "foo"}); err != nil {
		t.Fatal(err)
	}
	// hello → vbucket 528 → server 528 % 2 = 0; foo → 115 → 1.
	if got := out.String(); got != "hello a:11211 528\nfoo b:11211 115\n" {
		t.Fatalf("locate:\n%s", got)
	}
	keys, _ := ReadKeys(strings.NewReader("a\r\n\nb\n"))
	if strings.Join(keys, ",") != "a,b" {
		t.Fatalf("ReadKeys = %q", keys)
	}
}
