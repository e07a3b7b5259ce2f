package compat

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vbcache/vbcache/test/nodeproc"
)

var (
	rewrite  = flag.Bool("rewrite", false, "rewrite testdata/*.golden from memcached's replies")
	allDiffs = flag.Bool("alldiffs", false, "show the diff of every differing step, not only the first")
)

var (
	target     nodeproc.Kind // what is compared against memcached
	vbcacheBin string
	buildErr   error
)

func TestMain(m *testing.M) {
	flag.Parse()
	target = nodeproc.Vbcache
	if os.Getenv("VBCACHE_COMPAT_TARGET") == string(nodeproc.Memcached) {
		target = nodeproc.Memcached
	}
	var dir string
	if target == nodeproc.Vbcache {
		var err error
		dir, err = os.MkdirTemp("", "vbcache-compat-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		vbcacheBin, buildErr = nodeproc.BuildVbcache(dir)
	}
	code := m.Run()
	if dir != "" {
		os.RemoveAll(dir)
	}
	os.Exit(code)
}

const (
	stepTimeout = 5 * time.Second
	quietPeriod = 300 * time.Millisecond
	maxTimeouts = 3
)

// requireServers skips the test when memcached, the reference, is not
// installed, and fails it when vbcache could not be built.
func requireServers(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("memcached"); err != nil {
		nodeproc.Absent(t, "memcached not found in PATH (the reference implementation)")
	}
	if buildErr != nil {
		t.Fatalf("cannot build vbcache: %v", buildErr)
	}
}

// TestCompat plays every testdata/*.txt script against memcached and the
// target and requires identical normalized replies.
func TestCompat(t *testing.T) {
	requireServers(t)
	playScripts(t, "testdata/*.txt", "scripts", func(f string) (*script, func(*testing.T, string), error) {
		sc, err := loadScript(f, filepath.Base(f))
		if err != nil {
			return nil, nil, err
		}
		run := func(t *testing.T, goldenPath string) {
			start := func(kind nodeproc.Kind) *nodeproc.Node { return nodeproc.Start(t, kind, vbcacheBin, sc.flags...) }
			differential(t, sc, goldenPath, start, func(n *nodeproc.Node) [][]string { return play(t, sc, n) })
		}
		return sc, run, nil
	})
}

// playScripts runs a parallel subtest for every script file that matches
// pattern, named after the file without ".txt". load parses one file and
// returns the script and how to run it, given the path of its golden
// file. what names the scripts in the closing log line.
func playScripts(t *testing.T, pattern, what string, load func(path string) (*script, func(t *testing.T, goldenPath string), error)) {
	t.Helper()
	files, err := filepath.Glob(pattern)
	if err != nil || len(files) == 0 {
		t.Fatalf("no scripts in %s: %v", filepath.Dir(pattern), err)
	}
	total := 0
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".txt")
		sc, run, err := load(f)
		if err != nil {
			t.Fatal(err)
		}
		total += len(sc.steps)
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			run(t, strings.TrimSuffix(f, ".txt")+".golden")
		})
	}
	t.Logf("%d %s, %d steps; target %s", len(files), what, total, target)
}

// differential plays sc against memcached (start(nodeproc.Memcached), then
// play), stops it, checks its replies against the golden file, plays sc
// against the target and requires the same replies.
func differential(t *testing.T, sc *script, goldenPath string, start func(nodeproc.Kind) *nodeproc.Node, play func(*nodeproc.Node) [][]string) {
	ref := start(nodeproc.Memcached)
	want := play(ref)
	ref.Stop()

	checkGolden(t, goldenPath, renderGolden(sc, want))

	got := play(start(target))

	compareSteps(t, sc.name, sc.steps, want, got, target)
}

// checkGolden writes golden, memcached's rendered replies, to goldenPath
// with -rewrite; otherwise it logs a warning when the file is missing or
// says something else (the live memcached is the reference).
func checkGolden(t *testing.T, goldenPath, golden string) {
	t.Helper()
	if *rewrite {
		if err := os.WriteFile(goldenPath, []byte(golden), 0o644); err != nil {
			t.Fatal(err)
		}
	} else if old, err := os.ReadFile(goldenPath); err != nil {
		t.Logf("warning: no golden file %s (run with -rewrite): %v", goldenPath, err)
	} else if string(old) != golden {
		t.Logf("warning: live memcached differs from %s (review, then -rewrite):\n%s",
			goldenPath, diffLines(strings.Split(string(old), "\n"), strings.Split(golden, "\n"), "golden", "memcached"))
	}
}

// compareSteps fails the test for every step whose replies differ between
// memcached (want) and the target (got), except steps marked @differs,
// whose difference is only logged.
func compareSteps(t *testing.T, name string, steps []step, want, got [][]string, target nodeproc.Kind) {
	t.Helper()
	var bad []int
	for i := range steps {
		if equalLines(want[i], got[i]) {
			continue
		}
		if u := steps[i].unchecked; u != "" {
			t.Logf("%s:%d: not compared (%s):\n%s", name, steps[i].line, u,
				diffLines(want[i], got[i], "memcached", string(target)))
			continue
		}
		if d := steps[i].differs; d != "" && target != nodeproc.Memcached {
			t.Logf("%s:%d: deliberate difference (%s):\n%s", name, steps[i].line, d,
				diffLines(want[i], got[i], "memcached", string(target)))
			continue
		}
		bad = append(bad, i)
	}
	if len(bad) == 0 {
		return
	}
	first := steps[bad[0]]
	var where []string
	for _, i := range bad {
		where = append(where, fmt.Sprint(steps[i].line))
	}
	t.Errorf("%s: %d of %d steps differ (at lines %s)\nfirst difference, step at %s:%d:\n%s\n%s",
		name, len(bad), len(steps), strings.Join(where, ", "), name, first.line,
		indent(first.source), diffLines(want[bad[0]], got[bad[0]], "memcached", string(target)))
	if *allDiffs {
		for _, i := range bad[1:] {
			t.Errorf("step at %s:%d:\n%s\n%s", name, steps[i].line,
				indent(steps[i].source), diffLines(want[i], got[i], "memcached", string(target)))
		}
	}
}

func equalLines(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func indent(lines []string) string {
	var sb strings.Builder
	for _, l := range lines {
		sb.WriteString("    > " + l + "\n")
	}
	return sb.String()
}

// client is one connection of a script run.
type client struct {
	c net.Conn
}

// play runs the script against one server and returns, per step, the
// rendered normalized reply.
func play(t *testing.T, sc *script, node *nodeproc.Node) [][]string {
	norm := newNormalizer(sc)
	conns := map[int]*client{}
	defer func() {
		for _, c := range conns {
			c.c.Close()
		}
	}()
	drop := func(n int) {
		if c := conns[n]; c != nil {
			c.c.Close()
			delete(conns, n)
		}
	}
	out := make([][]string, len(sc.steps))
	timeouts := 0
	for i, st := range sc.steps {
		if timeouts >= maxTimeouts {
			out[i] = []string{"!not-run"}
			continue
		}
		var msg []byte
		for _, l := range st.payload {
			b, noEOL, err := expandLine(l, norm)
			if err != nil {
				t.Fatalf("%s:%d: %v", sc.name, st.line, err)
			}
			msg = append(msg, b...)
			if !noEOL {
				msg = append(msg, "\r\n"...)
			}
		}
		framed := !st.close && !st.raw && !st.nomn
		wantMN := 0 // MN replies that end the step: the script's own mn commands plus ours
		if framed {
			for _, seg := range bytes.Split(msg, []byte("\n")) {
				if seg = bytes.TrimSuffix(seg, []byte("\r")); string(seg) == "mn" || bytes.HasPrefix(seg, []byte("mn ")) {
					wantMN++
				}
			}
			msg = append(msg, "mn\r\n"...)
			wantMN++
		}
		var markers []string
		var reply []byte
		c := conns[st.conn]
		if c == nil {
			nc, err := net.DialTimeout("tcp", node.Addr, stepTimeout)
			if err != nil {
				markers = append(markers, "!connect-failed")
			} else {
				c = &client{c: nc}
				conns[st.conn] = c
			}
		}
		if c != nil {
			if len(msg) > 0 {
				_ = c.c.SetWriteDeadline(time.Now().Add(stepTimeout))
				if _, err := c.c.Write(msg); err != nil && !st.close {
					markers = append(markers, "!write-failed")
				}
			}
			var status string
			switch {
			case st.nomn:
			case st.close:
				reply, status = readUntil(c.c, 0, 0)
			case st.raw:
				reply, status = readUntil(c.c, 0, quietPeriod)
			default:
				reply, status = readUntil(c.c, wantMN, 0)
				if status == "" {
					reply = reply[:len(reply)-len("MN\r\n")]
				}
			}
			switch status {
			case "eof":
				markers = append(markers, "!eof")
				drop(st.conn)
			case "timeout":
				if st.close {
					markers = append(markers, "!timeout")
				} else {
					markers = append(markers, "!timeout")
					timeouts++
				}
				drop(st.conn)
			}
		}
		if st.exit {
			if node.WaitExit(stepTimeout) {
				markers = append(markers, "!exited")
			} else {
				markers = append(markers, "!running")
			}
		}
		out[i] = append(render(norm.reply(reply)), markers...)
	}
	return out
}

// readUntil reads from c until the data ends with the wantMN-th line "MN"
// (status ""), until EOF or a reset ("eof"), until quiet passes without data
// when quiet > 0 (status ""), or until the step deadline ("timeout").
func readUntil(c net.Conn, wantMN int, quiet time.Duration) ([]byte, string) {
	mn := []byte("MN\r\n")
	deadline := time.Now().Add(stepTimeout)
	var buf []byte
	tmp := make([]byte, 64<<10)
	for {
		d := deadline
		if quiet > 0 {
			d = time.Now().Add(quiet)
			if d.After(deadline) {
				d = deadline
			}
		}
		_ = c.SetReadDeadline(d)
		n, err := c.Read(tmp)
		buf = append(buf, tmp[:n]...)
		if wantMN > 0 && bytes.HasSuffix(buf, mn) {
			got := 0
			for i := 0; i+len(mn) <= len(buf); i++ {
				if bytes.HasPrefix(buf[i:], mn) && (i == 0 || (i >= 2 && buf[i-2] == '\r' && buf[i-1] == '\n')) {
					got++
				}
			}
			if got >= wantMN {
				return buf, ""
			}
		}
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				if quiet > 0 && time.Now().Before(deadline) {
					return buf, ""
				}
				return buf, "timeout"
			}
			if errors.Is(err, io.EOF) || isReset(err) {
				return buf, "eof"
			}
			return buf, "eof"
		}
	}
}

func isReset(err error) bool {
	return strings.Contains(err.Error(), "connection reset") || strings.Contains(err.Error(), "broken pipe")
}

// render turns a reply into display lines: one per CRLF-terminated line,
// escaped; runs of 8+ equal bytes as {X*N}; a bare LF shown as \n; a final
// unterminated fragment ended by \c.
func render(b []byte) []string {
	var lines []string
	for len(b) > 0 {
		i := bytes.Index(b, []byte("\r\n"))
		if i < 0 {
			lines = append(lines, escape(b)+`\c`)
			break
		}
		lines = append(lines, escape(b[:i]))
		b = b[i+2:]
	}
	return lines
}

func escape(b []byte) string {
	var sb strings.Builder
	for i := 0; i < len(b); {
		j := i
		for j < len(b) && b[j] == b[i] {
			j++
		}
		if j-i >= 8 {
			sb.WriteString("{" + escapeByte(b[i]) + "*" + fmt.Sprint(j-i) + "}")
			i = j
			continue
		}
		sb.WriteString(escapeByte(b[i]))
		i++
	}
	return sb.String()
}

func escapeByte(c byte) string {
	switch c {
	case '\r':
		return `\r`
	case '\n':
		return `\n`
	case '\t':
		return `\t`
	case 0:
		return `\0`
	case '\\', '{', '}':
		return `\` + string(c)
	}
	if c < 0x20 || c >= 0x7f {
		return fmt.Sprintf(`\x%02x`, c)
	}
	return string(c)
}

func renderGolden(sc *script, replies [][]string) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "# memcached's normalized replies to %s (go test ./test/compat -rewrite)\n", sc.name)
	if len(sc.flags) > 0 {
		fmt.Fprintf(&sb, "# flags: %s\n", strings.Join(sc.flags, " "))
	}
	for i, st := range sc.steps {
		fmt.Fprintf(&sb, "\n>>> %s:%d\n", sc.name, st.line)
		for _, l := range st.source {
			sb.WriteString(l + "\n")
		}
		sb.WriteString("<<<\n")
		for _, l := range replies[i] {
			sb.WriteString(l + "\n")
		}
	}
	return sb.String()
}

// diffLines returns a small unified-style diff of a and b.
func diffLines(a, b []string, an, bn string) string {
	const maxLines = 4000
	var sb strings.Builder
	fmt.Fprintf(&sb, "    --- %s\n    +++ %s\n", an, bn)
	if len(a) > maxLines || len(b) > maxLines {
		fmt.Fprintf(&sb, "    (too long to diff: %d vs %d lines)\n", len(a), len(b))
		return sb.String()
	}
	// LCS table.
	n, m := len(a), len(b)
	dp := make([][]int, n+1)
	for i := range dp {
		dp[i] = make([]int, m+1)
	}
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			if a[i] == b[j] {
				dp[i][j] = dp[i+1][j+1] + 1
			} else {
				dp[i][j] = max(dp[i+1][j], dp[i][j+1])
			}
		}
	}
	type op struct {
		kind byte
		s    string
	}
	var ops []op
	i, j := 0, 0
	for i < n || j < m {
		switch {
		case i < n && j < m && a[i] == b[j]:
			ops = append(ops, op{' ', a[i]})
			i++
			j++
		case j < m && (i == n || dp[i][j+1] >= dp[i+1][j]):
			ops = append(ops, op{'+', b[j]})
			j++
		default:
			ops = append(ops, op{'-', a[i]})
			i++
		}
	}
	// Show changed lines with 3 lines of context; elide the rest.
	show := make([]bool, len(ops))
	for k, o := range ops {
		if o.kind != ' ' {
			for d := max(0, k-3); d <= min(len(ops)-1, k+3); d++ {
				show[d] = true
			}
		}
	}
	skipped := false
	for k, o := range ops {
		if !show[k] {
			if !skipped {
				sb.WriteString("    ...\n")
			}
			skipped = true
			continue
		}
		skipped = false
		fmt.Fprintf(&sb, "    %c %s\n", o.kind, o.s)
	}
	return sb.String()
}

// TestScriptsParse checks the script language itself, without servers.
func TestScriptsParse(t *testing.T) {
	sc, err := parseScript("x.txt", "flags: -m 2 -M\n# c\nset k 0 0 {a*3}\n{a*3}\n\n@conn 2\n@close\nquit\n\nget ${cas1}\\c\n")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(sc.flags, " "); got != "-m 2 -M" {
		t.Errorf("flags = %q", got)
	}
	if len(sc.steps) != 3 || sc.steps[1].conn != 2 || !sc.steps[1].close || sc.steps[2].conn != 2 {
		t.Fatalf("steps = %+v", sc.steps)
	}
	n := newNormalizer(sc)
	b, noEOL, err := expandLine(sc.steps[2].payload[0], n)
	if err != nil || !noEOL || string(b) != "get 999999999" {
		t.Errorf("expand = %q %v %v", b, noEOL, err)
	}
	b, _, _ = expandLine(`a\r\n\0\xff{\x00*3}{ab*2}\{\s`, n)
	if string(b) != "a\r\n\x00\xff\x00\x00\x00abab{ " {
		t.Errorf("escapes = %q", b)
	}
	got := n.reply([]byte("VALUE k 0 2 77\r\nab\r\nVALUE j 0 2 78\r\n\r\n\r\nVALUE k 0 2 77\r\nxx\r\nEND\r\nHD c78 t99 l1\r\n"))
	want := "VALUE k 0 2 <cas1>\r\nab\r\nVALUE j 0 2 <cas2>\r\n\r\n\r\nVALUE k 0 2 <cas1>\r\nxx\r\nEND\r\nHD c<cas2> t99 l~0\r\n"
	if string(got) != want {
		t.Errorf("normalize:\n got %q\nwant %q", got, want)
	}
	if r := render([]byte("a{b\x00" + strings.Repeat("z", 10) + "\r\nq\n")); strings.Join(r, "|") != `a\{b\0{z*10}|q\n\c` {
		t.Errorf("render = %q", r)
	}
}
