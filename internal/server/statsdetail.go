package server

import (
	"fmt"
	"sync"
)

// This file keeps the counts behind "stats detail": per key prefix gets,
// hits, sets and deletes, recorded by the request path only while detail
// is on.

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
