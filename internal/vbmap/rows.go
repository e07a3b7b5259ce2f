package vbmap

import (
	"encoding/json"
	"strings"
)

// Decoding a map's rows with encoding/json costs about a microsecond per
// vbucket (its scanner passes over the input several times, and
// reflection stores each integer), and every node, proxy and manager
// decodes the whole map at each of a rebalance's commits: in a profile of
// a 3→4 rebalance, half of all CPU went there. So Parse walks the config
// by hand (parseConfig): the rows, arrays of small integers, are read
// directly (parseRows), and every other member's value, all small, is
// handed to encoding/json. Anything the walker does not expect (a key
// with escapes or non-ASCII letters, a bare map, rows with null or
// exponents) goes to encoding/json whole, whose answer, or error, stands.
// FuzzParseAgrees holds the two to the same results.

// Rows are a map's rows (Config.VBucketServerMap.VBucketMap and its
// forward map, or the manager's copy of them), decoded by parseRows when
// they are plain arrays of integers.
type Rows [][]int

// UnmarshalJSON decodes rows, by hand when it can.
func (r *Rows) UnmarshalJSON(data []byte) error {
	if v, ok := parseRows(data); ok {
		*r = v
		return nil
	}
	var v [][]int
	if err := json.Unmarshal(data, &v); err != nil {
		return err
	}
	*r = v
	return nil
}

// parseRows reads data as an array of arrays of integers (at most nine
// digits each), JSON's whitespace allowed between tokens, or returns
// false.
func parseRows(data []byte) ([][]int, bool) {
	s := scan{b: data}
	s.ws()
	r, ok := s.rows()
	s.ws()
	return r, ok && s.i == len(s.b)
}

// rows reads an array of arrays of integers at i. The rows share one
// backing array, each capped at its length, so that appending to one
// never writes into the next.
func (s *scan) rows() ([][]int, bool) {
	if !s.take('[') {
		return nil, false
	}
	back := make([]int, 0, 2048)
	starts := make([]int, 0, 1024) // each row's first entry in back
	s.ws()
	if !s.take(']') {
		for {
			s.ws()
			if !s.take('[') {
				return nil, false
			}
			starts = append(starts, len(back))
			s.ws()
			if !s.take(']') {
				for {
					s.ws()
					n, ok := s.smallInt()
					if !ok {
						return nil, false
					}
					back = append(back, n)
					s.ws()
					if s.take(',') {
						continue
					}
					if s.take(']') {
						break
					}
					return nil, false
				}
			}
			s.ws()
			if s.take(',') {
				continue
			}
			if s.take(']') {
				break
			}
			return nil, false
		}
	}
	out := make([][]int, len(starts))
	for k, a := range starts {
		e := len(back)
		if k+1 < len(starts) {
			e = starts[k+1]
		}
		out[k] = back[a:e:e]
	}
	return out, true
}

// parseConfig decodes data, a config with its envelope, into c, or
// returns false (c then holds nothing to keep).
func parseConfig(data []byte, c *Config) bool {
	seenMap := false
	s := scan{b: data}
	ok := s.members(func(key string) bool {
		if strings.EqualFold(key, "vBucketServerMap") {
			seenMap = true
			return s.serverMap(&c.VBucketServerMap)
		}
		v, ok := s.value()
		if !ok {
			return false
		}
		switch {
		case strings.EqualFold(key, "rev"):
			return json.Unmarshal(v, &c.Rev) == nil
		case strings.EqualFold(key, "revEpoch"):
			return json.Unmarshal(v, &c.RevEpoch) == nil
		case strings.EqualFold(key, "name"):
			return json.Unmarshal(v, &c.Name) == nil
		case strings.EqualFold(key, "uuid"):
			return json.Unmarshal(v, &c.UUID) == nil
		case strings.EqualFold(key, "nodeLocator"):
			return json.Unmarshal(v, &c.NodeLocator) == nil
		case strings.EqualFold(key, "bucketCapabilities"):
			return json.Unmarshal(v, &c.BucketCapabilities) == nil
		case strings.EqualFold(key, "nodes"):
			return json.Unmarshal(v, &c.Nodes) == nil
		case strings.EqualFold(key, "nodesExt"):
			return json.Unmarshal(v, &c.NodesExt) == nil
		}
		return json.Valid(v)
	})
	s.ws()
	return ok && seenMap && s.i == len(s.b)
}

// serverMap decodes the vBucketServerMap object at i into m, or returns
// false. Like encoding/json it decodes into what m holds: a second
// vBucketServerMap member adds to the first.
func (s *scan) serverMap(m *VBucketServerMap) bool {
	return s.members(func(key string) bool {
		var ok bool
		switch {
		case strings.EqualFold(key, "vBucketMap"):
			m.VBucketMap, ok = s.rows()
			return ok
		case strings.EqualFold(key, "vBucketMapForward"):
			m.VBucketMapForward, ok = s.rows()
			return ok
		}
		v, ok := s.value()
		if !ok {
			return false
		}
		switch {
		case strings.EqualFold(key, "hashAlgorithm"):
			return json.Unmarshal(v, &m.HashAlgorithm) == nil
		case strings.EqualFold(key, "numReplicas"):
			return json.Unmarshal(v, &m.NumReplicas) == nil
		case strings.EqualFold(key, "serverList"):
			return json.Unmarshal(v, &m.ServerList) == nil
		}
		return json.Valid(v)
	})
}

// members reads the JSON object at i, calling f with each member's key
// (plain ASCII without escapes, or members returns false) once i is at
// its value, which f reads. It returns false if there is no such object
// or f returns false.
func (s *scan) members(f func(key string) bool) bool {
	s.ws()
	if !s.take('{') {
		return false
	}
	s.ws()
	if s.take('}') {
		return true
	}
	for {
		s.ws()
		key, ok := s.plainString()
		if !ok {
			return false
		}
		s.ws()
		if !s.take(':') {
			return false
		}
		s.ws()
		if !f(key) {
			return false
		}
		s.ws()
		if s.take(',') {
			continue
		}
		return s.take('}')
	}
}

// scan reads JSON tokens from b at i.
type scan struct {
	b []byte
	i int
}

func (s *scan) ws() {
	for s.i < len(s.b) && (s.b[s.i] == ' ' || s.b[s.i] == '\t' || s.b[s.i] == '\n' || s.b[s.i] == '\r') {
		s.i++
	}
}

func (s *scan) take(c byte) bool {
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// smallInt reads a JSON integer of at most nine digits (no fraction, no
// exponent).
func (s *scan) smallInt() (int, bool) {
	neg := s.take('-')
	j := s.i
	n := 0
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		if s.i-j == 9 {
			return 0, false
		}
		n = n*10 + int(s.b[s.i]-'0')
		s.i++
	}
	if s.i == j || (s.b[j] == '0' && s.i-j > 1) {
		return 0, false
	}
	if s.i < len(s.b) && (s.b[s.i] == '.' || s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		return 0, false
	}
	if neg {
		n = -n
	}
	return n, true
}

// plainString reads a string of printable ASCII without escapes.
func (s *scan) plainString() (string, bool) {
	if !s.take('"') {
		return "", false
	}
	j := s.i
	for s.i < len(s.b) && s.b[s.i] != '"' {
		if c := s.b[s.i]; c < 0x20 || c >= 0x7f || c == '\\' {
			return "", false
		}
		s.i++
	}
	if s.i == len(s.b) {
		return "", false
	}
	s.i++
	return string(s.b[j : s.i-1]), true
}

// value returns the bytes of the value at i: a string, an object or an
// array (brackets matched, strings inside skipped), or a literal or
// number up to the next delimiter. Its syntax is left to the caller.
func (s *scan) value() ([]byte, bool) {
	j := s.i
	if s.i >= len(s.b) {
		return nil, false
	}
	switch s.b[s.i] {
	case '"':
		if !s.skipString() {
			return nil, false
		}
	case '{', '[':
		depth := 0
		for s.i < len(s.b) {
			switch s.b[s.i] {
			case '"':
				if !s.skipString() {
					return nil, false
				}
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
			}
			s.i++
			if depth == 0 {
				break
			}
		}
		if depth != 0 {
			return nil, false
		}
	default:
		for s.i < len(s.b) {
			c := s.b[s.i]
			if c == ',' || c == '}' || c == ']' || c == ' ' || c == '\t' || c == '\n' || c == '\r' {
				break
			}
			s.i++
		}
	}
	return s.b[j:s.i], s.i > j
}

// skipString moves past the string at i, escapes included.
func (s *scan) skipString() bool {
	s.i++ // the opening quote
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case '\\':
			s.i += 2
			continue
		case '"':
			s.i++
			return true
		}
		s.i++
	}
	return false
}
