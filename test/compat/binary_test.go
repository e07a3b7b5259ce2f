package compat

// The binary half of the differential suite: every testdata/binary/*.txt
// script is played against memcached and against the target, like the text
// scripts, but its steps are binary-protocol packets written one per line
// and its replies are decoded packets.
//
// # Binary script language
//
// The file layout is the text suite's: '#' comments, an optional first
// `flags:` line, steps separated by blank lines, directives (@conn N,
// @close, @raw, @nomn) before the payload. One more header line:
//
//	sasl: <user>:<password>
//
// starts both servers with credentials for that one user (see
// nodeproc.SASLEnv); the script's flags must include -S (memcached also
// needs -B binary with -S).
//
// Each payload line is one request packet; all packets of a step go out in
// one write. A packet line is an opcode followed by fields:
//
//	set key=foo value=bar flags=1 exptime=0 cas=0 opaque=7 vbucket=0
//	getkq key=foo opaque=2
//	incr key=n delta=5 initial=10 exptime=0xffffffff
//	0x3d key=x                      an opcode by number
//	raw 80 0a 0000 00 00 0000 00000000 00000000 0000000000000000
//
// Opcode names: get getq getk getkq set setq add addq replace replaceq
// delete deleteq incr incrq decr decrq quit quitq flush flushq noop version
// append appendq prepend prependq stat verbosity touch gat gatq gatk gatkq
// sasl-list sasl-auth sasl-step (memcached's protocol_binary.h numbering).
//
// Fields (numbers are decimal or 0x hex; key, value and numbers take the
// text suite's escapes, {X*N} repetitions and ${casN}/${now±N}; use \s for
// a space):
//
//	key= value=         the key and value bytes
//	opaque= cas= vbucket= datatype= magic=
//	flags= exptime=     the extras of set/add/replace (both default 0) and
//	                    the exptime extra of touch/gat*/flush (flush sends
//	                    no extras unless exptime= is given)
//	delta= initial=     incr/decr extras: delta(8) initial(8) exptime(4)
//	level=              verbosity's extra (default 0)
//	extras=<hex>        replace the extras (extras= alone: none)
//	keylen= extlen= bodylen=
//	                    overwrite that header field after the packet is
//	                    built (the body stays as built): malformed headers
//	raw <hex>...        the bytes as written (spaces ignored)
//
// A line starting with "text " is sent as a text-protocol line instead
// (the rest of the line, escapes expanded, plus "\r\n"), for text and
// binary mixed on one connection or sent to a -B binary server. A step of
// text lines only is framed like a text-suite step (with mn; do not use mn
// in it) and its reply rendered as text.
//
// # Framing
//
// After a step's packets the harness sends a NOOP with opaque 0xf00df00d
// and reads packets until that NOOP's reply, which is not shown (if it is
// an error the step is marked !frame-status-0xNNNN). In a sasl: script the
// frame is a VERSION instead: memcached refuses a NOOP before
// authentication (Auth error, then close) but answers VERSION. With
// @close it sends nothing more and reads until EOF; with @raw it reads until
// 1 s passes without data (for servers that swallow or never answer, as
// after a huge body length). A step that times out is marked !timeout, as
// in the text suite.
//
// # Rendering
//
// Each reply packet is one line:
//
//	< GETK OK opaque=2 cas=<cas1> flags=1 key="foo" value="bar"
//
// opcode name, status name, opaque and CAS always; then datatype when not 0,
// flags= for a 4-byte extra of the get/gat family, extras=<hex> for other
// extras, key= when present and value= when present (escaped as in the
// text suite; an 8-byte incr/decr result as value=u64:<n>). Lengths are not
// shown: they follow from the fields. A packet whose header lengths do not
// add up is shown as !bad-lengths with the header fields. Bytes that are
// not a reply packet (a text reply, a truncated packet) are rendered as text
// lines. The normalization rules of normalize_test.go apply to CAS values
// (rule 1) and to Stat packets (key = stat name, value = stat value: rules
// 6, 7 and 9); in addition (binary only):
//
//	B1. a successful Version reply's value → "*";
//	B2. a successful SASL List Mechs reply's value: the tokens starting with
//	    SCRAM-SHA are removed (SCRAM-SHA-1/256/512, or Couchbase's spelling
//	    SCRAM-SHA1/256/512; vbcache offers SCRAM,
//	    Debian's memcached is configured for PLAIN only; the SCRAM
//	    mechanisms are tested on their own in sasl_test.go).

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vbcache/vbcache/internal/protocol"
	"github.com/vbcache/vbcache/test/nodeproc"
)

// The script names of the binary protocol opcodes (memcached's
// protocol_binary.h; internal/protocol has the numbers).
var binOpcodes = map[string]protocol.Opcode{
	"get": protocol.OpGet, "set": protocol.OpSet, "add": protocol.OpAdd,
	"replace": protocol.OpReplace, "delete": protocol.OpDelete,
	"incr": protocol.OpIncrement, "decr": protocol.OpDecrement,
	"quit": protocol.OpQuit, "flush": protocol.OpFlush, "getq": protocol.OpGetQ,
	"noop": protocol.OpNoop, "version": protocol.OpVersion, "getk": protocol.OpGetK,
	"getkq": protocol.OpGetKQ, "append": protocol.OpAppend, "prepend": protocol.OpPrepend,
	"stat": protocol.OpStat, "setq": protocol.OpSetQ, "addq": protocol.OpAddQ,
	"replaceq": protocol.OpReplaceQ, "deleteq": protocol.OpDeleteQ,
	"incrq": protocol.OpIncrementQ, "decrq": protocol.OpDecrementQ,
	"quitq": protocol.OpQuitQ, "flushq": protocol.OpFlushQ, "appendq": protocol.OpAppendQ,
	"prependq": protocol.OpPrependQ, "verbosity": protocol.OpVerbosity,
	"touch": protocol.OpTouch, "gat": protocol.OpGAT, "gatq": protocol.OpGATQ,
	"sasl-list": protocol.OpSASLList, "sasl-auth": protocol.OpSASLAuth,
	"sasl-step": protocol.OpSASLStep, "gatk": protocol.OpGATK, "gatkq": protocol.OpGATKQ,
}

var binOpNames = func() map[protocol.Opcode]string {
	m := map[protocol.Opcode]string{}
	for k, v := range binOpcodes {
		m[v] = strings.ToUpper(k)
	}
	return m
}()

// binStatusNames are the rendered names of reply statuses.
var binStatusNames = map[protocol.Status]string{
	protocol.StatusOK: "OK", protocol.StatusKeyNotFound: "KEY_ENOENT",
	protocol.StatusKeyExists: "KEY_EEXISTS", protocol.StatusTooLarge: "E2BIG",
	protocol.StatusInvalid: "EINVAL", protocol.StatusNotStored: "NOT_STORED",
	protocol.StatusDeltaBadValue: "DELTA_BADVAL", protocol.StatusNotMyVBucket: "NOT_MY_VBUCKET",
	protocol.StatusAuthError: "AUTH_ERROR", protocol.StatusAuthContinue: "AUTH_CONTINUE",
	protocol.StatusUnknown: "UNKNOWN_COMMAND", protocol.StatusNoMemory: "ENOMEM",
	// memcached's NOT_SUPPORTED, EINTERNAL and EBUSY, which
	// internal/protocol does not name.
	0x83: "NOT_SUPPORTED", 0x84: "EINTERNAL", 0x85: "EBUSY",
	protocol.StatusTmpFail: "ETMPFAIL",
}

const (
	frameOpaque = 0xf00df00d
	// binRawQuiet ends an @raw step's read. Longer than the text suite's
	// 300 ms: here @raw steps often expect a reply (an unframeable one), and
	// on a loaded 2-core machine 300 ms of silence came before it.
	binRawQuiet = time.Second
)

// binPacket is a request as a script line describes it.
type binPacket struct {
	magic, dtype       byte
	op                 protocol.Opcode
	vbucket            uint16
	opaque             uint32
	cas                uint64
	key, value, extras []byte
	keylen, extlen     int // -1: as built
	bodylen            int64
}

// encode builds the 24-byte header (protocol.AppendHeader; the diagram is
// in internal/protocol's binary.go) and the body: extras, key, value. The
// vbucket goes into bytes 6-7 whatever the magic byte says (a script may
// send magic=0x81), and keylen=, extlen= and bodylen= overwrite the
// lengths as the header's field widths truncate them.
func (p *binPacket) encode() []byte {
	kl, el, bl := int64(len(p.key)), int64(len(p.extras)), int64(len(p.extras)+len(p.key)+len(p.value))
	if p.keylen >= 0 {
		kl = int64(p.keylen)
	}
	if p.extlen >= 0 {
		el = int64(p.extlen)
	}
	if p.bodylen >= 0 {
		bl = p.bodylen
	}
	h := protocol.Header{
		Magic:    p.magic,
		Opcode:   p.op,
		KeyLen:   uint16(kl),
		ExtLen:   uint8(el),
		DataType: p.dtype,
		VBucket:  p.vbucket,                  // bytes 6-7 of a request
		Status:   protocol.Status(p.vbucket), // and of a packet with the response magic
		BodyLen:  uint32(bl),
		Opaque:   p.opaque,
		CAS:      p.cas,
	}
	b := make([]byte, 0, protocol.HeaderLen+len(p.extras)+len(p.key)+len(p.value))
	b = protocol.AppendHeader(b, &h)
	b = append(b, p.extras...)
	b = append(b, p.key...)
	return append(b, p.value...)
}

// encodeBinLine turns one payload line into bytes. v resolves ${...}
// (nil: syntax check only).
func encodeBinLine(line string, v vars) ([]byte, error) {
	if rest, ok := strings.CutPrefix(line, "text "); ok {
		b, noEOL, err := expandLine(rest, v)
		if err != nil {
			return nil, err
		}
		if !noEOL {
			b = append(b, "\r\n"...)
		}
		return b, nil
	}
	f := strings.Fields(line)
	if len(f) == 0 {
		return nil, errors.New("empty packet line")
	}
	if f[0] == "raw" {
		b, err := hex.DecodeString(strings.Join(f[1:], ""))
		if err != nil {
			return nil, fmt.Errorf("raw: %v", err)
		}
		return b, nil
	}
	p := &binPacket{magic: protocol.MagicRequest, keylen: -1, extlen: -1, bodylen: -1}
	if op, ok := binOpcodes[f[0]]; ok {
		p.op = op
	} else if n, err := strconv.ParseUint(f[0], 0, 8); err == nil && strings.HasPrefix(f[0], "0x") {
		p.op = protocol.Opcode(n)
	} else {
		return nil, fmt.Errorf("unknown opcode %q", f[0])
	}
	fields := map[string][]byte{}
	for _, tok := range f[1:] {
		name, val, ok := strings.Cut(tok, "=")
		if !ok {
			return nil, fmt.Errorf("field %q is not name=value", tok)
		}
		if _, dup := fields[name]; dup {
			return nil, fmt.Errorf("field %s given twice", name)
		}
		b, err := expand(val, v)
		if err != nil {
			return nil, fmt.Errorf("%s: %v", name, err)
		}
		fields[name] = b
	}
	num := func(name string, bits int, def uint64) (uint64, error) {
		b, ok := fields[name]
		if !ok {
			return def, nil
		}
		delete(fields, name)
		n, err := strconv.ParseUint(string(b), 0, bits)
		if err != nil {
			return 0, fmt.Errorf("%s=%q: %v", name, b, err)
		}
		return n, nil
	}
	var err error
	get := func(name string, bits int, def uint64) uint64 {
		n, e := num(name, bits, def)
		if e != nil && err == nil {
			err = e
		}
		return n
	}
	p.key, p.value = fields["key"], fields["value"]
	delete(fields, "key")
	delete(fields, "value")
	p.magic = byte(get("magic", 8, protocol.MagicRequest))
	p.dtype = byte(get("datatype", 8, 0))
	p.vbucket = uint16(get("vbucket", 16, 0))
	p.opaque = uint32(get("opaque", 32, 0))
	p.cas = get("cas", 64, 0)
	u32 := func(b []byte, n uint64) []byte { return binary.BigEndian.AppendUint32(b, uint32(n)) }
	switch p.op {
	case protocol.OpSet, protocol.OpAdd, protocol.OpReplace, protocol.OpSetQ, protocol.OpAddQ, protocol.OpReplaceQ:
		p.extras = u32(u32(nil, get("flags", 32, 0)), get("exptime", 32, 0))
	case protocol.OpIncrement, protocol.OpDecrement, protocol.OpIncrementQ, protocol.OpDecrementQ:
		p.extras = binary.BigEndian.AppendUint64(nil, get("delta", 64, 0))
		p.extras = binary.BigEndian.AppendUint64(p.extras, get("initial", 64, 0))
		p.extras = u32(p.extras, get("exptime", 32, 0))
	case protocol.OpTouch, protocol.OpGAT, protocol.OpGATQ, protocol.OpGATK, protocol.OpGATKQ:
		p.extras = u32(nil, get("exptime", 32, 0))
	case protocol.OpFlush, protocol.OpFlushQ: // the delay extra is optional
		if _, ok := fields["exptime"]; ok {
			p.extras = u32(nil, get("exptime", 32, 0))
		}
	case protocol.OpVerbosity:
		p.extras = u32(nil, get("level", 32, 0))
	}
	if x, ok := fields["extras"]; ok {
		delete(fields, "extras")
		if p.extras, err = hex.DecodeString(string(x)); err != nil {
			return nil, fmt.Errorf("extras: %v", err)
		}
	}
	p.keylen = int(int64(get("keylen", 16, 1<<63)))
	p.extlen = int(int64(get("extlen", 8, 1<<63)))
	p.bodylen = int64(get("bodylen", 32, 1<<63))
	if err != nil {
		return nil, err
	}
	for name := range fields {
		return nil, fmt.Errorf("field %s does not apply to %s", name, f[0])
	}
	return p.encode(), nil
}

// binScript is a parsed testdata/binary/*.txt file. It reuses the text
// script's step structure; sasl is the sasl: header ("" for none).
type binScript struct {
	*script
	sasl string
}

func parseBinScript(name, text string) (*binScript, error) {
	// Pull out the sasl: header, then let the text parser do the rest with
	// its payload check disabled (packet lines are checked here).
	bs := &binScript{}
	var kept []string
	for i, l := range strings.Split(strings.ReplaceAll(text, "\r\n", "\n"), "\n") {
		if rest, ok := strings.CutPrefix(l, "sasl:"); ok {
			bs.sasl = strings.TrimSpace(rest)
			if !strings.Contains(bs.sasl, ":") {
				return nil, fmt.Errorf("%s:%d: usage: sasl: user:password", name, i+1)
			}
			l = "# " + l // keep line numbers
		}
		kept = append(kept, l)
	}
	sc, err := parseScriptLines(name, strings.Join(kept, "\n"), false)
	if err != nil {
		return nil, err
	}
	for _, st := range sc.steps {
		for _, l := range st.payload {
			if _, err := encodeBinLine(l, nil); err != nil {
				return nil, fmt.Errorf("%s:%d: %q: %v", name, st.line, l, err)
			}
		}
	}
	bs.script = sc
	return bs, nil
}

// TestBinaryCompat plays every testdata/binary/*.txt script against
// memcached and the target and requires identical normalized replies.
func TestBinaryCompat(t *testing.T) {
	requireServers(t)
	playScripts(t, "testdata/binary/*.txt", "binary scripts", func(f string) (*script, func(*testing.T, string), error) {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, nil, err
		}
		sc, err := parseBinScript(filepath.Base(f), string(b))
		if err != nil {
			return nil, nil, err
		}
		run := func(t *testing.T, goldenPath string) {
			start := func(kind nodeproc.Kind) *nodeproc.Node { return startBin(t, sc, kind) }
			differential(t, sc.script, goldenPath, start, func(n *nodeproc.Node) [][]string { return playBin(t, sc, n) })
		}
		return sc.script, run, nil
	})
}

func startBin(t *testing.T, sc *binScript, kind nodeproc.Kind) *nodeproc.Node {
	var env []string
	if sc.sasl != "" {
		user, pass, _ := strings.Cut(sc.sasl, ":")
		env = nodeproc.SASLEnv(t, user, pass, kind == nodeproc.Memcached)
	}
	return nodeproc.StartEnv(t, kind, vbcacheBin, env, sc.flags...)
}

// playBin runs the script against one server and returns, per step, the
// rendered normalized replies.
func playBin(t *testing.T, sc *binScript, node *nodeproc.Node) [][]string {
	norm := newNormalizer(sc.script)
	conns := map[int]net.Conn{}
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	drop := func(n int) {
		if c := conns[n]; c != nil {
			c.Close()
			delete(conns, n)
		}
	}
	// The frame is a NOOP; under SASL a VERSION, which memcached answers
	// before authentication (a NOOP then gets Auth error and a close).
	frameOp := protocol.OpNoop
	if sc.sasl != "" {
		frameOp = protocol.OpVersion
	}
	noop := (&binPacket{magic: protocol.MagicRequest, op: frameOp, opaque: frameOpaque, keylen: -1, extlen: -1, bodylen: -1}).encode()
	out := make([][]string, len(sc.steps))
	timeouts := 0
	for i, st := range sc.steps {
		if timeouts >= maxTimeouts {
			out[i] = []string{"!not-run"}
			continue
		}
		var msg []byte
		for _, l := range st.payload {
			b, err := encodeBinLine(l, norm)
			if err != nil {
				t.Fatalf("%s:%d: %v", sc.name, st.line, err)
			}
			msg = append(msg, b...)
		}
		framed := !st.close && !st.raw && !st.nomn
		textStep := true // every line is a text line: frame with mn like the text suite
		for _, l := range st.payload {
			textStep = textStep && strings.HasPrefix(l, "text ")
		}
		if framed && textStep {
			msg = append(msg, "mn\r\n"...)
		} else if framed {
			msg = append(msg, noop...)
		}
		var markers []string
		var reply []byte
		c := conns[st.conn]
		if c == nil {
			nc, err := net.DialTimeout("tcp", node.Addr, stepTimeout)
			if err != nil {
				markers = append(markers, "!connect-failed")
			} else {
				c = nc
				conns[st.conn] = c
			}
		}
		if c != nil {
			if len(msg) > 0 {
				_ = c.SetWriteDeadline(time.Now().Add(stepTimeout))
				if _, err := c.Write(msg); err != nil && !st.close {
					markers = append(markers, "!write-failed")
				}
			}
			var status string
			switch {
			case st.nomn:
			case st.close:
				reply, status = readUntil(c, 0, 0)
			case st.raw:
				reply, status = readUntil(c, 0, binRawQuiet)
			case textStep:
				reply, status = readUntil(c, 1, 0)
				if status == "" {
					reply = reply[:len(reply)-len("MN\r\n")]
				}
			default:
				reply, status = readBinFramed(c, frameOp)
				if status != "" && status != "eof" && status != "timeout" {
					markers = append(markers, "!frame-"+status)
					status = ""
				}
			}
			switch status {
			case "eof":
				markers = append(markers, "!eof")
				drop(st.conn)
			case "timeout":
				markers = append(markers, "!timeout")
				if !st.close {
					timeouts++
				}
				drop(st.conn)
			}
		}
		out[i] = append(renderBin(reply, norm), markers...)
	}
	return out
}

// readBinFramed reads reply packets until the reply to the harness's frame
// packet (opcode op, opaque frameOpaque) and returns what came before it;
// status is "" when the frame was answered OK, "status-0xNNNN" when it was
// answered with an error, else "eof" or "timeout".
func readBinFramed(c net.Conn, op protocol.Opcode) ([]byte, string) {
	deadline := time.Now().Add(stepTimeout)
	var buf []byte
	tmp := make([]byte, 64<<10)
	for {
		// Walk the complete packets received so far.
		var h protocol.Header
		for off := 0; protocol.ParseHeader(buf[off:], &h) == nil && h.Magic == protocol.MagicResponse; {
			blen := int(h.BodyLen)
			if len(buf)-off < protocol.HeaderLen+blen {
				break
			}
			if h.Opcode == op && h.Opaque == frameOpaque {
				if h.Status != protocol.StatusOK {
					return buf[:off], fmt.Sprintf("status-0x%04x", uint16(h.Status))
				}
				return buf[:off], ""
			}
			off += protocol.HeaderLen + blen
		}
		_ = c.SetReadDeadline(deadline)
		n, err := c.Read(tmp)
		buf = append(buf, tmp[:n]...)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return buf, "timeout"
			}
			if errors.Is(err, io.EOF) || isReset(err) {
				return buf, "eof"
			}
			return buf, "eof"
		}
	}
}

// renderBin decodes reply packets into display lines (see the package doc
// "Rendering"); anything that is not a complete reply packet is rendered as
// text lines.
func renderBin(b []byte, norm *normalizer) []string {
	var lines []string
	for len(b) > 0 {
		var h protocol.Header
		if protocol.ParseHeader(b, &h) != nil || h.Magic != protocol.MagicResponse {
			lines = append(lines, render(norm.reply(b))...)
			break
		}
		op, klen, elen := h.Opcode, int(h.KeyLen), int(h.ExtLen)
		dtype, status := h.DataType, h.Status
		blen := int(h.BodyLen)
		opaque, cas := h.Opaque, h.CAS
		if len(b) < protocol.HeaderLen+blen {
			lines = append(lines, fmt.Sprintf("!truncated-packet (%d of %d body bytes)", len(b)-protocol.HeaderLen, blen))
			lines = append(lines, render(b)...)
			break
		}
		body := b[protocol.HeaderLen : protocol.HeaderLen+blen]
		b = b[protocol.HeaderLen+blen:]
		opName, ok := binOpNames[op]
		if !ok {
			opName = fmt.Sprintf("op=0x%02x", byte(op))
		}
		stName, ok := binStatusNames[status]
		if !ok {
			stName = fmt.Sprintf("status=0x%04x", uint16(status))
		}
		var sb strings.Builder
		fmt.Fprintf(&sb, "< %s %s opaque=%d cas=%s", opName, stName, opaque, norm.cas(strconv.FormatUint(cas, 10)))
		if dtype != 0 {
			fmt.Fprintf(&sb, " datatype=0x%02x", dtype)
		}
		if klen+elen > blen {
			fmt.Fprintf(&sb, " !bad-lengths keylen=%d extlen=%d bodylen=%d body=%q", klen, elen, blen, body)
			lines = append(lines, sb.String())
			continue
		}
		extras, key, value := body[:elen], string(body[elen:elen+klen]), body[elen+klen:]
		var getFamily bool
		switch op {
		case protocol.OpGet, protocol.OpGetQ, protocol.OpGetK, protocol.OpGetKQ,
			protocol.OpGAT, protocol.OpGATQ, protocol.OpGATK, protocol.OpGATKQ:
			getFamily = true
		}
		switch {
		case len(extras) == 4 && getFamily:
			fmt.Fprintf(&sb, " flags=%d", binary.BigEndian.Uint32(extras))
		case len(extras) > 0:
			fmt.Fprintf(&sb, " extras=%x", extras)
		}
		val := escape(value)
		switch {
		case op == protocol.OpStat && status == protocol.StatusOK && klen > 0: // Stat: normalize like STAT lines
			s := norm.stat(key, string(value))
			key, val, _ = strings.Cut(s, " ")
			val = escape(sortPrefixLines([]byte(val)))
		case op == protocol.OpVersion && status == protocol.StatusOK: // B1
			val = "*"
		case op == protocol.OpSASLList && status == protocol.StatusOK: // B2
			var keep []string
			for _, m := range strings.Fields(string(value)) {
				if !strings.HasPrefix(m, "SCRAM-SHA") {
					keep = append(keep, m)
				}
			}
			val = escape([]byte(strings.Join(keep, " ")))
		case (op == protocol.OpIncrement || op == protocol.OpDecrement || op == protocol.OpIncrementQ || op == protocol.OpDecrementQ) &&
			status == protocol.StatusOK && len(value) == 8:
			val = "u64:" + strconv.FormatUint(binary.BigEndian.Uint64(value), 10)
		}
		if klen > 0 {
			fmt.Fprintf(&sb, " key=\"%s\"", escape([]byte(key)))
		}
		if len(value) > 0 {
			if strings.HasPrefix(val, "u64:") || val == "*" {
				fmt.Fprintf(&sb, " value=%s", val)
			} else {
				fmt.Fprintf(&sb, " value=\"%s\"", val)
			}
		}
		lines = append(lines, sb.String())
	}
	return lines
}

// TestBinaryScriptsParse checks the packet encoder and the renderer,
// without servers.
func TestBinaryScriptsParse(t *testing.T) {
	sc, err := parseBinScript("x.txt", "flags: -S -B binary\nsasl: u:p\n\nset key=foo value=a\\sb flags=1 exptime=2 opaque=7 cas=${cas1}\ngetq key=foo\n\n@close\nraw 80 07 0000 00 00 0000 00000000 00000000 0000000000000000\n")
	if err != nil {
		t.Fatal(err)
	}
	if sc.sasl != "u:p" || len(sc.steps) != 2 || !sc.steps[1].close || strings.Join(sc.flags, " ") != "-S -B binary" {
		t.Fatalf("parsed %+v %+v", sc, sc.steps)
	}
	got, err := encodeBinLine("set key=foo value=a\\sb flags=1 exptime=2 opaque=7 cas=0x10 vbucket=3", nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []byte{
		0x80, 0x01, // magic, opcode Set
		0x00, 0x03, // key length
		0x08, 0x00, // extras length, data type
		0x00, 0x03, // vbucket
		0x00, 0x00, 0x00, 0x0e, // total body 8 + 3 + 3
		0x00, 0x00, 0x00, 0x07, // opaque
		0, 0, 0, 0, 0, 0, 0, 0x10, // cas
		0, 0, 0, 1, 0, 0, 0, 2, // extras: flags, exptime
		'f', 'o', 'o', 'a', ' ', 'b',
	}
	if !bytes.Equal(got, want) {
		t.Errorf("encode set:\n got % x\nwant % x", got, want)
	}
	got, _ = encodeBinLine("get key=k bodylen=0x10000 extlen=2", nil)
	if got[4] != 2 || binary.BigEndian.Uint32(got[8:]) != 0x10000 || len(got) != 25 {
		t.Errorf("overrides: % x", got)
	}
	for _, bad := range []string{"nosuch key=a", "get key", "get flags=1", "set flags=x", "raw 8"} {
		if _, err := encodeBinLine(bad, nil); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
	n := newNormalizer(sc.script)
	reply := append([]byte{0x81, 0x0c, 0, 1, 4, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0x30, 0x39, 0, 0, 0, 5, 'k', 'v', 'v'},
		0x81, 0x0b, 0, 0, 0, 0, 0, 0, 0, 0, 0, 6, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, '1', '.', '6', '.', '1', '8')
	reply = append(reply, "ERROR\r\n"...)
	r := strings.Join(renderBin(reply, n), "|")
	if r != `< GETK OK opaque=9 cas=<cas1> flags=5 key="k" value="vv"|< VERSION OK opaque=0 cas=0 value=*|ERROR` {
		t.Errorf("render = %s", r)
	}
}
