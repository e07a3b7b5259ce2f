package compat

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// step is one exchange of a script.
type step struct {
	line    int      // 1-based line of the first line of the step
	source  []string // the step's lines as written (for rendering)
	payload []string // payload lines, unexpanded
	conn    int      // client connection number
	close   bool     // @close
	raw     bool     // @raw
	nomn    bool     // @nomn
	exit    bool     // @exit
	// differs names a deliberate difference (@differs <reason>): vbcache's
	// reply to this step is not compared with memcached's, only logged.
	// Every use must say why, and vbcache's own behaviour there is pinned
	// by a test of its own (see internal/server).
	differs string
	// unchecked names why this step's reply depends on the machine rather
	// than on the server (@unchecked <reason>): it is played against both
	// servers, so later steps see its effects, but its reply is not
	// compared, only logged. For environment facts such as how many
	// descriptors the reference process happens to hold.
	unchecked string
}

// script is a parsed testdata/*.txt file.
type script struct {
	name     string
	flags    []string
	steps    []step
	literals []int64         // every decimal number in the script text (TTL tolerance)
	fixedCAS map[string]bool // numbers of 3+ digits written as E<n>: CAS values kept verbatim
	vary     map[string]bool // "vary:" header: stats fields normalized to * in this script only
}

func parseScript(name, text string) (*script, error) {
	return parseScriptLines(name, text, true)
}

// parseScriptLines parses the common script layout; checkPayload checks
// payload lines as text-protocol lines (the binary suite checks its own).
func parseScriptLines(name, text string, checkPayload bool) (*script, error) {
	s := &script{name: name, fixedCAS: map[string]bool{}, vary: map[string]bool{}}
	lines := strings.Split(strings.ReplaceAll(text, "\r\n", "\n"), "\n")
	conn := 1
	var cur *step
	flush := func() {
		if cur != nil && (len(cur.payload) > 0 || cur.close || cur.exit) {
			s.steps = append(s.steps, *cur)
		} else if cur != nil {
			conn = cur.conn // a directive-only step (e.g. "@conn 2") just switches
		}
		cur = nil
	}
	for i, l := range lines {
		ln := i + 1
		if strings.HasPrefix(l, "#") {
			continue
		}
		if l == "" {
			flush()
			continue
		}
		if rest, ok := strings.CutPrefix(l, "flags:"); ok {
			if len(s.steps) > 0 || cur != nil {
				return nil, fmt.Errorf("%s:%d: flags: must come before the first step", name, ln)
			}
			s.flags = strings.Fields(rest)
			continue
		}
		if rest, ok := strings.CutPrefix(l, "vary:"); ok {
			if len(s.steps) > 0 || cur != nil {
				return nil, fmt.Errorf("%s:%d: vary: must come before the first step", name, ln)
			}
			for _, f := range strings.Fields(rest) {
				s.vary[f] = true
			}
			continue
		}
		if cur == nil {
			cur = &step{line: ln, conn: conn}
		}
		cur.source = append(cur.source, l)
		if strings.HasPrefix(l, "@") && len(cur.payload) == 0 {
			f := strings.Fields(l)
			switch f[0] {
			case "@conn":
				if len(f) != 2 {
					return nil, fmt.Errorf("%s:%d: usage: @conn N", name, ln)
				}
				n, err := strconv.Atoi(f[1])
				if err != nil || n < 1 || n > 64 {
					return nil, fmt.Errorf("%s:%d: bad connection number %q", name, ln, f[1])
				}
				cur.conn, conn = n, n
			case "@close":
				cur.close = true
			case "@raw":
				cur.raw = true
			case "@nomn":
				cur.nomn = true
			case "@exit":
				cur.exit = true
			case "@differs":
				if len(f) < 2 {
					return nil, fmt.Errorf("%s:%d: usage: @differs <reason>", name, ln)
				}
				cur.differs = strings.Join(f[1:], " ")
			case "@unchecked":
				if len(f) < 2 {
					return nil, fmt.Errorf("%s:%d: usage: @unchecked <reason>", name, ln)
				}
				cur.unchecked = strings.Join(f[1:], " ")
			default:
				return nil, fmt.Errorf("%s:%d: unknown directive %s", name, ln, f[0])
			}
			continue
		}
		cur.payload = append(cur.payload, l)
		// Check the escapes now so a typo fails at parse time.
		if _, _, err := expandLine(l, nil); err != nil && checkPayload {
			return nil, fmt.Errorf("%s:%d: %v", name, ln, err)
		}
	}
	flush()
	// Literals: numbers anywhere in the text; fixed CAS values: E<n>/C<n>.
	for _, l := range lines {
		if strings.HasPrefix(l, "#") {
			continue
		}
		for j := 0; j < len(l); {
			if l[j] < '0' || l[j] > '9' {
				j++
				continue
			}
			k := j
			for k < len(l) && l[k] >= '0' && l[k] <= '9' {
				k++
			}
			if v, err := strconv.ParseInt(l[j:k], 10, 64); err == nil {
				s.literals = append(s.literals, v)
			}
			if j > 0 && l[j-1] == 'E' && (j == 1 || l[j-2] == ' ') && k-j >= 3 {
				s.fixedCAS[l[j:k]] = true
			}
			j = k
		}
	}
	return s, nil
}

// vars resolves ${...} substitutions for one server's run.
type vars interface {
	lookup(name string) (string, error)
}

// expand turns a payload line into the bytes to send (without the line
// terminator) and reports whether the line ended in \c.
func expandLine(l string, v vars) ([]byte, bool, error) {
	if v == nil {
		v = noVars{}
	}
	noEOL := false
	if strings.HasSuffix(l, `\c`) && !strings.HasSuffix(l, `\\c`) {
		l, noEOL = l[:len(l)-2], true
	}
	b, err := expand(l, v)
	return b, noEOL, err
}

// expand decodes escapes, {X*N} repetitions and ${var} substitutions. With
// v == nil substitutions expand to a placeholder (syntax check only).
func expand(l string, v vars) ([]byte, error) {
	var out []byte
	for i := 0; i < len(l); {
		c := l[i]
		switch {
		case c == '\\':
			if i+1 >= len(l) {
				return nil, fmt.Errorf("dangling backslash")
			}
			switch l[i+1] {
			case 'r':
				out = append(out, '\r')
			case 'n':
				out = append(out, '\n')
			case 't':
				out = append(out, '\t')
			case '0':
				out = append(out, 0)
			case 's':
				out = append(out, ' ')
			case 'e':
				// nothing: lets a payload line be empty
			case '\\', '{', '}', '$', '*':
				out = append(out, l[i+1])
			case 'x':
				if i+4 > len(l) {
					return nil, fmt.Errorf("short \\x escape")
				}
				n, err := strconv.ParseUint(l[i+2:i+4], 16, 8)
				if err != nil {
					return nil, fmt.Errorf("bad \\x escape %q", l[i:i+4])
				}
				out = append(out, byte(n))
				i += 4
				continue
			case 'c':
				return nil, fmt.Errorf(`\c is only allowed at the end of a line`)
			default:
				return nil, fmt.Errorf("unknown escape \\%c", l[i+1])
			}
			i += 2
		case c == '$' && i+1 < len(l) && l[i+1] == '{':
			end := strings.IndexByte(l[i:], '}')
			if end < 0 {
				return nil, fmt.Errorf("unterminated ${")
			}
			name := l[i+2 : i+end]
			if !strings.HasPrefix(name, "cas") && !strings.HasPrefix(name, "now") {
				return nil, fmt.Errorf("unknown variable %q", name)
			}
			if v == nil {
				out = append(out, '0')
			} else {
				val, err := v.lookup(name)
				if err != nil {
					return nil, err
				}
				out = append(out, val...)
			}
			i += end + 1
		case c == '{':
			end := -1
			for j := i + 1; j < len(l); j++ {
				if l[j] == '\\' {
					j++
					continue
				}
				if l[j] == '}' {
					end = j
					break
				}
			}
			if end < 0 {
				return nil, fmt.Errorf("unterminated {X*N}")
			}
			body := l[i+1 : end]
			star := strings.LastIndexByte(body, '*')
			if star < 0 {
				return nil, fmt.Errorf("{X*N} without *: %q", body)
			}
			n, err := strconv.Atoi(body[star+1:])
			if err != nil || n < 0 || n > 64<<20 {
				return nil, fmt.Errorf("bad repeat count in %q", body)
			}
			unit, err := expand(body[:star], v)
			if err != nil {
				return nil, err
			}
			out = append(out, bytes.Repeat(unit, n)...)
			i = end + 1
		default:
			out = append(out, c)
			i++
		}
	}
	return out, nil
}

type noVars struct{}

func (noVars) lookup(string) (string, error) { return "0", nil }

// nowVar evaluates now, now+N, now-N.
func nowVar(name string) (string, error) {
	now := time.Now().Unix()
	rest := strings.TrimPrefix(name, "now")
	if rest == "" {
		return strconv.FormatInt(now, 10), nil
	}
	n, err := strconv.ParseInt(rest[1:], 10, 64)
	if err != nil || (rest[0] != '+' && rest[0] != '-') {
		return "", fmt.Errorf("bad variable ${%s}", name)
	}
	if rest[0] == '-' {
		n = -n
	}
	return strconv.FormatInt(now+n, 10), nil
}

func loadScript(path, name string) (*script, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return parseScript(name, string(b))
}
