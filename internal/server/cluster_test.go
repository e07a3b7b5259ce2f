package server

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vbcache/vbcache/internal/protocol"
	"github.com/vbcache/vbcache/internal/vbmap"
	"github.com/vbcache/vbcache/internal/vbucket"
)

const testVBuckets = 16

// startCluster runs a node in cluster mode with testVBuckets vbuckets.
func startCluster(t *testing.T, mutate func(*Config)) (*Server, string) {
	t.Helper()
	return startServer(t, func(c *Config) {
		c.VBuckets = testVBuckets
		if mutate != nil {
			mutate(c)
		}
	})
}

// keyFor returns a key that hashes to vb among testVBuckets.
func keyFor(t testing.TB, vb int) string {
	t.Helper()
	for i := range 100000 {
		k := fmt.Sprintf("key-%d", i)
		if vbmap.VBucketString(k, testVBuckets) == vb {
			return k
		}
	}
	t.Fatalf("no key for vbucket %d", vb)
	return ""
}

// binClient is a binary-protocol test connection.
type binClient struct {
	t  testing.TB
	nc net.Conn
	r  *bufio.Reader
}

func dialBin(t testing.TB, addr string) *binClient {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	return &binClient{t: t, nc: nc, r: bufio.NewReader(nc)}
}

func (b *binClient) send(op protocol.Opcode, vb uint16, extras, key, value []byte) {
	b.t.Helper()
	req := protocol.AppendRequest(nil, &protocol.Request{
		Header: protocol.Header{Opcode: op, VBucket: vb, Opaque: 0xfeed},
		Extras: extras, Key: key, Value: value,
	})
	// Each request gets its 10 s to be answered: a test that makes many
	// takes longer than that on a loaded machine.
	b.nc.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := b.nc.Write(req); err != nil {
		b.t.Fatal(err)
	}
}

func (b *binClient) read() (protocol.Header, []byte) {
	b.t.Helper()
	hb := make([]byte, protocol.HeaderLen)
	if _, err := io.ReadFull(b.r, hb); err != nil {
		b.t.Fatal(err)
	}
	var h protocol.Header
	protocol.ParseHeader(hb, &h)
	body := make([]byte, h.BodyLen)
	if _, err := io.ReadFull(b.r, body); err != nil {
		b.t.Fatal(err)
	}
	return h, body
}

func (b *binClient) do(op protocol.Opcode, vb uint16, extras, key, value []byte) (protocol.Header, []byte) {
	b.t.Helper()
	b.send(op, vb, extras, key, value)
	return b.read()
}

func (b *binClient) setState(vb uint16, st vbucket.State) {
	b.t.Helper()
	h, body := b.do(protocol.OpSetVBucket, vb, []byte{byte(st)}, nil, nil)
	if h.Status != protocol.StatusOK {
		b.t.Fatalf("SET_VBUCKET %d %v: status %#x %q", vb, st, h.Status, body)
	}
}

func (b *binClient) set(vb uint16, key, value string) {
	b.t.Helper()
	h, body := b.do(protocol.OpSet, vb, make([]byte, 8), []byte(key), []byte(value))
	if h.Status != protocol.StatusOK {
		b.t.Fatalf("set %s in vb %d: status %#x %q", key, vb, h.Status, body)
	}
}

func stateExtras(st uint32) []byte { return binary.BigEndian.AppendUint32(nil, st) }

func revExtras(epoch, rev int64) []byte {
	b := binary.BigEndian.AppendUint64(nil, uint64(epoch))
	return binary.BigEndian.AppendUint64(b, uint64(rev))
}

func testConfigJSON(t testing.TB, epoch, rev int64) []byte {
	t.Helper()
	cfg := vbmap.Spread([]string{"127.0.0.1:11211"}, testVBuckets)
	cfg.RevEpoch, cfg.Rev = epoch, rev
	return []byte(fmt.Sprintf(`{"rev":%d,"revEpoch":%d,"nodeLocator":"vbucket","vBucketServerMap":{"hashAlgorithm":"CRC","numReplicas":0,"serverList":["127.0.0.1:11211"],"vBucketMap":%s}}`,
		rev, epoch, vbMapJSON(cfg)))
}

func vbMapJSON(cfg *vbmap.Config) string {
	var sb strings.Builder
	sb.WriteByte('[')
	for i, row := range cfg.VBucketServerMap.VBucketMap {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, "[%d]", row[0])
	}
	sb.WriteByte(']')
	return sb.String()
}

// binKeyCommands are the key commands checked against the vbucket table,
// each with valid extras and value.
var binKeyCommands = []struct {
	name          string
	op            protocol.Opcode
	extras, value []byte
}{
	{"get", protocol.OpGet, nil, nil},
	{"getk", protocol.OpGetK, nil, nil},
	{"set", protocol.OpSet, make([]byte, 8), []byte("v")},
	{"add", protocol.OpAdd, make([]byte, 8), []byte("v")},
	{"replace", protocol.OpReplace, make([]byte, 8), []byte("v")},
	{"append", protocol.OpAppend, nil, []byte("v")},
	{"prepend", protocol.OpPrepend, nil, []byte("v")},
	{"delete", protocol.OpDelete, nil, nil},
	{"incr", protocol.OpIncrement, make([]byte, 20), nil},
	{"decr", protocol.OpDecrement, make([]byte, 20), nil},
	{"touch", protocol.OpTouch, make([]byte, 4), nil},
	{"gat", protocol.OpGAT, make([]byte, 4), nil},
	{"gatk", protocol.OpGATK, make([]byte, 4), nil},
	{"getq", protocol.OpGetQ, nil, nil},
	{"setq", protocol.OpSetQ, make([]byte, 8), []byte("v")},
}

func TestClusterStatesByCommand(t *testing.T) {
	_, addr := startCluster(t, nil)
	c := dialBin(t, addr)
	c.setState(1, vbucket.Active)
	c.setState(2, vbucket.Replica)
	c.setState(3, vbucket.Active)
	c.setState(3, vbucket.Dead)
	states := []struct {
		name string
		vb   uint16
		mine bool
	}{
		{"active", 1, true},
		{"replica", 2, false},
		{"dead-after-active", 3, false},
		{"dead-at-start", 4, false},
		{"out-of-range", testVBuckets, false},
		{"max-id", 0xffff, false},
	}
	for _, withConfig := range []bool{false, true} {
		var wantBody []byte
		if withConfig {
			wantBody = testConfigJSON(t, 1, 7)
			if h, body := c.do(protocol.OpSetClusterConfig, 0, nil, []byte("default"), wantBody); h.Status != protocol.StatusOK {
				t.Fatalf("SET_CLUSTER_CONFIG: %#x %q", h.Status, body)
			}
		}
		for _, st := range states {
			for _, cmd := range binKeyCommands {
				t.Run(fmt.Sprintf("config=%v/%s/%s", withConfig, st.name, cmd.name), func(t *testing.T) {
					outer := c.t
					c.t = t
					defer func() { c.t = outer }()
					c.send(cmd.op, st.vb, cmd.extras, []byte("k"), cmd.value)
					// A Noop after the command: quiet commands answer
					// nothing on success, and the stream must stay in step.
					c.send(protocol.OpNoop, 0, nil, nil, nil)
					h, body := c.read()
					if st.mine {
						if h.Status == protocol.StatusNotMyVBucket {
							t.Fatalf("refused on an active vbucket: %q", body)
						}
					} else {
						if h.Status != protocol.StatusNotMyVBucket || h.Opcode != cmd.op || h.Opaque != 0xfeed {
							t.Fatalf("got %+v %q, want NOT_MY_VBUCKET", h, body)
						}
						if string(body) != string(wantBody) {
							t.Fatalf("body %q, want %q", body, wantBody)
						}
					}
					if h.Opcode != protocol.OpNoop {
						h, _ = c.read()
					}
					if h.Opcode != protocol.OpNoop {
						t.Fatalf("stream out of step: %+v", h)
					}
				})
			}
		}
	}
}

func TestClusterVBucketOpcodes(t *testing.T) {
	_, addr := startCluster(t, nil)
	c := dialBin(t, addr)
	getState := func(vb uint16) uint32 {
		t.Helper()
		h, body := c.do(protocol.OpGetVBucket, vb, nil, nil, nil)
		if h.Status != protocol.StatusOK || len(body) != 4 {
			t.Fatalf("GET_VBUCKET %d: %#x %q", vb, h.Status, body)
		}
		return binary.BigEndian.Uint32(body)
	}
	if st := getState(7); st != 4 {
		t.Fatalf("vb 7 starts %d, want dead (4)", st)
	}
	for _, st := range []uint32{1, 2, 3, 4} {
		// The 1-byte form, then the legacy 4-byte big-endian one.
		if h, _ := c.do(protocol.OpSetVBucket, 7, []byte{byte(st)}, nil, nil); h.Status != protocol.StatusOK {
			t.Fatalf("SET_VBUCKET 1-byte %d: %#x", st, h.Status)
		}
		if got := getState(7); got != st {
			t.Fatalf("after 1-byte SET_VBUCKET %d: %d", st, got)
		}
		c.setState(7, vbucket.Active)
		if h, _ := c.do(protocol.OpSetVBucket, 7, stateExtras(st), nil, nil); h.Status != protocol.StatusOK {
			t.Fatalf("SET_VBUCKET 4-byte %d: %#x", st, h.Status)
		}
		if got := getState(7); got != st {
			t.Fatalf("after 4-byte SET_VBUCKET %d: %d", st, got)
		}
	}
	for _, bad := range [][]byte{nil, {0}, {5}, {0xff}, stateExtras(0), stateExtras(0x101), {0, 1}} {
		h, body := c.do(protocol.OpSetVBucket, 7, bad, nil, nil)
		if h.Status != protocol.StatusInvalid || string(body) != "Invalid arguments" {
			t.Errorf("SET_VBUCKET extras %x: %#x %q", bad, h.Status, body)
		}
	}
	if st := getState(7); st != 4 {
		t.Fatalf("bad SET_VBUCKET changed the state to %d", st)
	}
	for _, op := range []protocol.Opcode{protocol.OpSetVBucket, protocol.OpGetVBucket, protocol.OpDelVBucket} {
		var ex []byte
		if op == protocol.OpSetVBucket {
			ex = []byte{1}
		}
		if h, _ := c.do(op, testVBuckets, ex, nil, nil); h.Status != protocol.StatusNotMyVBucket {
			t.Errorf("%#x on an out-of-range vbucket: %#x", op, h.Status)
		}
	}
	c.setState(9, vbucket.Active)
	if h, _ := c.do(protocol.OpDelVBucket, 9, nil, nil, nil); h.Status != protocol.StatusOK {
		t.Fatalf("DEL_VBUCKET: %#x", h.Status)
	}
	if st := getState(9); st != 4 {
		t.Fatalf("after DEL_VBUCKET: %d, want dead", st)
	}
}

func TestClusterGetReplica(t *testing.T) {
	_, addr := startCluster(t, nil)
	c := dialBin(t, addr)
	c.setState(5, vbucket.Active)
	c.set(5, "r", "replicated")
	if h, _ := c.do(protocol.OpGetReplica, 5, nil, []byte("r"), nil); h.Status != protocol.StatusNotMyVBucket {
		t.Fatalf("GET_REPLICA on an active vbucket: %#x", h.Status)
	}
	c.setState(5, vbucket.Replica)
	if h, _ := c.do(protocol.OpGet, 5, nil, []byte("r"), nil); h.Status != protocol.StatusNotMyVBucket {
		t.Fatalf("GET on a replica: %#x", h.Status)
	}
	h, body := c.do(protocol.OpGetReplica, 5, nil, []byte("r"), nil)
	if h.Status != protocol.StatusOK || h.Opcode != protocol.OpGetReplica || string(body) != "\x00\x00\x00\x00replicated" {
		t.Fatalf("GET_REPLICA: %+v %q", h, body)
	}
	if h, _ := c.do(protocol.OpGetReplica, 5, nil, []byte("none"), nil); h.Status != protocol.StatusKeyNotFound {
		t.Fatalf("GET_REPLICA miss: %#x", h.Status)
	}
	c.setState(5, vbucket.Dead)
	if h, _ := c.do(protocol.OpGetReplica, 5, nil, []byte("r"), nil); h.Status != protocol.StatusNotMyVBucket {
		t.Fatalf("GET_REPLICA on a dead vbucket: %#x", h.Status)
	}
}

// waitParked spins, without sleeping, until n requests are parked.
func waitParked(s *Server, n int) {
	for s.cl.vbs.Parked() != n {
		runtime.Gosched()
	}
}

func TestClusterPendingReleased(t *testing.T) {
	for _, tc := range []struct {
		to         vbucket.State
		wantStatus protocol.Status
		wantBody   string
	}{
		{vbucket.Active, protocol.StatusOK, "\x00\x00\x00\x00parked"},
		{vbucket.Dead, protocol.StatusNotMyVBucket, ""},
		{vbucket.Replica, protocol.StatusNotMyVBucket, ""},
	} {
		t.Run(tc.to.String(), func(t *testing.T) {
			s, addr := startCluster(t, func(c *Config) { c.VBucketParkTimeout = time.Hour })
			admin := dialBin(t, addr)
			admin.setState(6, vbucket.Active)
			admin.set(6, "p", "parked")
			admin.setState(6, vbucket.Pending)

			client := dialBin(t, addr)
			client.send(protocol.OpGet, 6, nil, []byte("p"), nil)
			waitParked(s, 1)
			admin.setState(6, tc.to)
			h, body := client.read()
			if h.Status != tc.wantStatus || string(body) != tc.wantBody {
				t.Fatalf("parked GET after %v: %#x %q", tc.to, h.Status, body)
			}
			waitParked(s, 0)
			// The connection carries on.
			h, _ = client.do(protocol.OpNoop, 0, nil, nil, nil)
			if h.Opcode != protocol.OpNoop {
				t.Fatalf("after park: %+v", h)
			}
		})
	}
}

func TestClusterPendingSetWaitsForValue(t *testing.T) {
	// A parked set whose value arrives in pieces: it is checked again when
	// the rest comes, and stored once the vbucket is active.
	s, addr := startCluster(t, func(c *Config) { c.VBucketParkTimeout = time.Hour })
	admin := dialBin(t, addr)
	admin.setState(2, vbucket.Pending)
	client := dialBin(t, addr)
	req := protocol.AppendRequest(nil, &protocol.Request{
		Header: protocol.Header{Opcode: protocol.OpSet, VBucket: 2},
		Extras: make([]byte, 8), Key: []byte("s"), Value: []byte("later"),
	})
	client.nc.Write(req[:len(req)-2])
	waitParked(s, 1)
	admin.setState(2, vbucket.Active)
	client.nc.Write(req[len(req)-2:])
	if h, body := client.read(); h.Status != protocol.StatusOK {
		t.Fatalf("set: %#x %q", h.Status, body)
	}
	h, body := admin.do(protocol.OpGet, 2, nil, []byte("s"), nil)
	if h.Status != protocol.StatusOK || string(body[4:]) != "later" {
		t.Fatalf("get: %#x %q", h.Status, body)
	}
}

func TestClusterPendingTimeout(t *testing.T) {
	s, addr := startCluster(t, func(c *Config) { c.VBucketParkTimeout = 10 * time.Millisecond })
	c := dialBin(t, addr)
	c.setState(4, vbucket.Pending)
	h, body := c.do(protocol.OpSet, 4, make([]byte, 8), []byte("k"), []byte("v"))
	if h.Status != protocol.StatusTmpFail || string(body) != "Temporary failure" {
		t.Fatalf("parked set: %#x %q", h.Status, body)
	}
	if n := s.cl.vbs.Parked(); n != 0 {
		t.Fatalf("%d requests still parked", n)
	}
	tc := dialText(t, addr)
	tc.expect("get "+keyFor(t, 4)+"\r\n", "SERVER_ERROR temporary failure\r\n")
	h, _ = c.do(protocol.OpNoop, 0, nil, nil, nil)
	if h.Opcode != protocol.OpNoop {
		t.Fatalf("after timeout: %+v", h)
	}
}

func TestClusterParkedReleasedOnShutdown(t *testing.T) {
	// startServer's cleanup cancels Serve; with an hour-long park timeout
	// it returns only if shutdown releases the parked request.
	s, addr := startCluster(t, func(c *Config) { c.VBucketParkTimeout = time.Hour })
	c := dialBin(t, addr)
	c.setState(4, vbucket.Pending)
	c.send(protocol.OpGet, 4, nil, []byte("k"), nil)
	waitParked(s, 1)
}

func TestClusterConfigRevisions(t *testing.T) {
	_, addr := startCluster(t, nil)
	c := dialBin(t, addr)
	get := func(extras []byte) string {
		t.Helper()
		h, body := c.do(protocol.OpGetClusterConfig, 0, extras, nil, nil)
		if h.Status != protocol.StatusOK {
			t.Fatalf("GET_CLUSTER_CONFIG: %#x %q", h.Status, body)
		}
		return string(body)
	}
	setCfg := func(extras, value []byte) protocol.Status {
		t.Helper()
		h, _ := c.do(protocol.OpSetClusterConfig, 0, extras, []byte("default"), value)
		return h.Status
	}
	if got := get(nil); got != "" {
		t.Fatalf("no config yet: %q", got)
	}
	v12 := testConfigJSON(t, 1, 2)
	if st := setCfg(nil, v12); st != protocol.StatusOK {
		t.Fatalf("first config: %#x", st)
	}
	if got := get(nil); got != string(v12) {
		t.Fatalf("GET = %q", got)
	}
	for _, old := range []struct{ epoch, rev int64 }{{1, 1}, {1, 2}, {0, 9}} {
		if st := setCfg(nil, testConfigJSON(t, old.epoch, old.rev)); st != protocol.StatusKeyExists {
			t.Errorf("older config (%d,%d): %#x, want KEY_EEXISTS", old.epoch, old.rev, st)
		}
	}
	if got := get(nil); got != string(v12) {
		t.Fatalf("an older config replaced the stored one: %q", got)
	}
	// Client extras: empty body unless the stored config is newer.
	for _, tc := range []struct {
		epoch, rev int64
		want       string
	}{
		{1, 2, ""}, {1, 3, ""}, {2, 0, ""}, {1, 1, string(v12)}, {0, 100, string(v12)},
	} {
		if got := get(revExtras(tc.epoch, tc.rev)); got != tc.want {
			t.Errorf("GET with (%d,%d) = %q, want %q", tc.epoch, tc.rev, got, tc.want)
		}
	}
	// A newer epoch wins even with a lower rev.
	v21 := testConfigJSON(t, 2, 1)
	if st := setCfg(nil, v21); st != protocol.StatusOK {
		t.Fatalf("newer epoch: %#x", st)
	}
	// Extras, when given, order the config instead of its JSON.
	if st := setCfg(revExtras(2, 5), v12); st != protocol.StatusOK {
		t.Fatalf("newer by extras: %#x", st)
	}
	if got := get(nil); got != string(v12) {
		t.Fatalf("GET = %q", got)
	}
	if st := setCfg(revExtras(2, 4), v21); st != protocol.StatusKeyExists {
		t.Fatalf("older by extras: %#x", st)
	}
	// Bad input is refused and the connection stays usable.
	bad := []struct {
		name          string
		extras, value []byte
	}{
		{"not json", nil, []byte("{")},
		{"bad map", nil, []byte(`{"rev":9,"vBucketServerMap":{"serverList":[],"vBucketMap":[[0]]}}`)},
		{"vbucket count", nil, []byte(`{"rev":9,"vBucketServerMap":{"hashAlgorithm":"CRC","serverList":["a:1"],"vBucketMap":[[0],[0]]}}`)},
		{"short extras", []byte{1, 2, 3}, testConfigJSON(t, 9, 9)},
	}
	for _, b := range bad {
		if st := setCfg(b.extras, b.value); st != protocol.StatusInvalid {
			t.Errorf("%s: %#x, want Invalid arguments", b.name, st)
		}
	}
	if got := get(nil); got != string(v12) {
		t.Fatalf("GET after bad sets = %q", got)
	}
}

func TestStandaloneIgnoresVBuckets(t *testing.T) {
	_, addr := startServer(t, nil)
	c := dialBin(t, addr)
	for _, op := range []protocol.Opcode{protocol.OpSetVBucket, protocol.OpGetVBucket, protocol.OpDelVBucket,
		protocol.OpGetReplica, protocol.OpSetClusterConfig, protocol.OpGetClusterConfig} {
		var ex []byte
		if op == protocol.OpSetVBucket {
			ex = []byte{1}
		}
		h, body := c.do(op, 3, ex, nil, nil)
		if h.Status != protocol.StatusUnknown || string(body) != "Unknown command" {
			t.Errorf("standalone %#x: %#x %q", op, h.Status, body)
		}
	}
	// Any vbucket id is served.
	c.set(0xffff, "x", "y")
	if h, body := c.do(protocol.OpGet, 1234, nil, []byte("x"), nil); h.Status != protocol.StatusOK || string(body[4:]) != "y" {
		t.Fatalf("standalone get: %#x %q", h.Status, body)
	}
}

// textClient is a text-protocol test connection.
type textClient struct {
	t  testing.TB
	nc net.Conn
	r  *bufio.Reader
}

func dialText(t testing.TB, addr string) *textClient {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	return &textClient{t: t, nc: nc, r: bufio.NewReader(nc)}
}

func (c *textClient) expect(req, want string) {
	c.t.Helper()
	// Each request gets its 10 s to be answered: a test that makes many
	// (TestLoopUnrulyClients) takes longer than that on a loaded machine.
	c.nc.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c.nc, req); err != nil {
		c.t.Fatal(err)
	}
	got := make([]byte, len(want))
	if _, err := io.ReadFull(c.r, got); err != nil {
		c.t.Fatalf("%q: read %q: %v", req, got, err)
	}
	if string(got) != want {
		c.t.Fatalf("%q: got %q, want %q", req, got, want)
	}
}

func TestClusterTextNotMyVBucket(t *testing.T) {
	_, addr := startCluster(t, nil)
	admin := dialBin(t, addr)
	admin.setState(1, vbucket.Active)
	mine, other := keyFor(t, 1), keyFor(t, 2)
	const nmvb = "SERVER_ERROR not my vbucket\r\n"
	c := dialText(t, addr)
	c.expect("set "+mine+" 0 0 1\r\na\r\n", "STORED\r\n")
	// A refused storage command swallows its data; the next command works.
	c.expect("set "+other+" 0 0 5\r\nhello\r\nget "+mine+"\r\n", nmvb+"VALUE "+mine+" 0 1\r\na\r\nEND\r\n")
	c.expect("add "+other+" 0 0 1\r\nb\r\n", nmvb)
	c.expect("cas "+other+" 0 0 1 5\r\nb\r\n", nmvb)
	c.expect("append "+other+" 0 0 1\r\nb\r\n", nmvb)
	c.expect("get "+other+"\r\n", nmvb)
	c.expect("gets "+mine+" "+other+"\r\n", nmvb)
	c.expect("gat 0 "+other+"\r\n", nmvb)
	c.expect("incr "+other+" 1\r\n", nmvb)
	c.expect("decr "+other+" 1\r\n", nmvb)
	c.expect("touch "+other+" 0\r\n", nmvb)
	c.expect("delete "+other+"\r\n", nmvb)
	c.expect("mg "+other+" v\r\n", nmvb)
	c.expect("md "+other+"\r\n", nmvb)
	c.expect("ma "+other+"\r\n", nmvb)
	c.expect("ms "+other+" 2\r\nhi\r\nmg "+mine+" v\r\n", nmvb+"VA 1\r\na\r\n")
	// Many keys: those past the first batch of tokens are checked too.
	var many strings.Builder
	many.WriteString("get")
	for range 40 {
		many.WriteString(" " + mine)
	}
	c.expect(many.String()+" "+other+"\r\n", nmvb)
	c.expect("mn\r\n", "MN\r\n")
	// A multi-get of owned keys is served.
	c.expect("get "+mine+" "+mine+"\r\n", "VALUE "+mine+" 0 1\r\na\r\nVALUE "+mine+" 0 1\r\na\r\nEND\r\n")
}

func TestClusterConfigValidate(t *testing.T) {
	for _, n := range []int{-1, 3, 1000, 131072} {
		if _, err := New(Config{VBuckets: n}); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "vbuckets") {
			t.Errorf("VBuckets %d: %v", n, err)
		}
	}
	if _, err := New(Config{VBuckets: 1024, VBucketParkTimeout: -time.Second}); err == nil {
		t.Error("negative park timeout accepted")
	}
}

func TestClusterHotPathDoesNotAllocate(t *testing.T) {
	s, err := New(Config{Port: -1, PortSet: true, Version: "t", VBuckets: testVBuckets, InsecureCluster: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.store.Close()
	for vb := range testVBuckets / 2 {
		s.cl.vbs.Set(vb, vbucket.Active)
	}
	var mine, other string
	for i := 0; mine == "" || other == ""; i++ {
		k := fmt.Sprintf("key:%d", i)
		if vbmap.VBucketString(k, testVBuckets) < testVBuckets/2 {
			mine = k
		} else {
			other = k
		}
	}
	mineVB := uint16(vbmap.VBucketString(mine, testVBuckets))
	for _, req := range []string{
		"set " + mine + " 0 0 10\r\n0123456789\r\n",
		"get " + mine + "\r\n",
		"get " + other + "\r\n",
		"mg " + mine + " v c f t\r\n",
		string(protocol.AppendRequest(nil, &protocol.Request{Header: protocol.Header{Opcode: protocol.OpGetK, VBucket: mineVB}, Key: []byte(mine)})),
		string(protocol.AppendRequest(nil, &protocol.Request{Header: protocol.Header{Opcode: protocol.OpGetK, VBucket: testVBuckets - 1}, Key: []byte(mine)})),
	} {
		in := []byte(req)
		c := newTestConn(s, req)
		c.out = make([]byte, 0, 4096)
		allocs := testing.AllocsPerRun(200, func() {
			c.mode = modeUnknown
			c.rbuf = in
			c.r, c.w = 0, len(in)
			c.out = c.out[:0]
			c.processInput()
		})
		if allocs != 0 {
			t.Errorf("%q allocates %.1f times per request", req, allocs)
		}
	}
}

// FuzzClusterConn feeds arbitrary bytes to a cluster-mode connection: the
// vbucket opcodes, config opcodes and bootstrap commands must never panic
// or leave the store locked.
func FuzzClusterConn(f *testing.F) {
	req := func(op protocol.Opcode, vb uint16, extras, key, value []byte) []byte {
		return protocol.AppendRequest(nil, &protocol.Request{Header: protocol.Header{Opcode: op, VBucket: vb}, Extras: extras, Key: key, Value: value})
	}
	var b []byte
	b = append(b, req(protocol.OpSetVBucket, 3, []byte{1}, nil, nil)...)
	b = append(b, req(protocol.OpSet, 3, make([]byte, 8), []byte("k"), []byte("v"))...)
	b = append(b, req(protocol.OpGet, 3, nil, []byte("k"), nil)...)
	b = append(b, req(protocol.OpGet, 4, nil, []byte("k"), nil)...)
	b = append(b, req(protocol.OpSetVBucket, 4, []byte{0, 0, 0, 3}, nil, nil)...)
	b = append(b, req(protocol.OpGet, 4, nil, []byte("k"), nil)...)
	b = append(b, req(protocol.OpGetVBucket, 3, nil, nil, nil)...)
	b = append(b, req(protocol.OpDelVBucket, 3, nil, nil, nil)...)
	f.Add(b)
	f.Add(req(protocol.OpSetClusterConfig, 0, nil, []byte("default"),
		[]byte(`{"rev":2,"vBucketServerMap":{"serverList":["127.0.0.1:1"],"vBucketMap":[[0],[0],[0],[0],[0],[0],[0],[0]]}}`)))
	f.Add(req(protocol.OpGetClusterConfig, 0, make([]byte, 16), nil, nil))
	f.Add(req(protocol.OpHello, 0, nil, []byte(`{"a":"x"}`), []byte{0, 3, 0, 8, 0, 0x12}))
	f.Add(req(protocol.OpSelectBucket, 0, nil, []byte("default"), nil))
	f.Add(req(protocol.OpGetReplica, 5, nil, []byte("k"), nil))
	f.Add([]byte("set k 0 0 1\r\nx\r\nget k\r\nmg k v\r\n"))
	s, err := New(Config{Port: -1, PortSet: true, Version: "fuzz", VBuckets: 8, InsecureCluster: true,
		VBucketParkTimeout: time.Millisecond, Store: storeCfgForFuzz()})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(s.store.Close)
	f.Fuzz(func(t *testing.T, in []byte) {
		c := newConn(s, nil)
		c.ctr = &s.counters[0]
		c.rbuf = append([]byte(nil), in...)
		c.r, c.w = 0, len(in)
		c.processInput()
		var c2 conn
		c2.s = s
		s.store.Begin(&c2.tx, []byte("probe"))
		c2.tx.End()
	})
}

// TestClusterDelVBucketDropsItems: DEL_VBUCKET removes the vbucket's items
// (they are gone when it comes back active) and nothing else.
func TestClusterDelVBucketDropsItems(t *testing.T) {
	s, _ := startServer(t, func(c *Config) { c.VBuckets = 8 })
	c := newTestConn(s, "")
	run := func(op protocol.Opcode, vb uint16, extras, key, value []byte) []byte {
		c.out = c.out[:0]
		in := protocol.AppendRequest(nil, &protocol.Request{Header: protocol.Header{Opcode: op, VBucket: vb}, Extras: extras, Key: key, Value: value})
		c.mode = modeUnknown
		c.rbuf, c.r, c.w = in, 0, len(in)
		c.processInput()
		return append([]byte(nil), c.out...)
	}
	status := func(resp []byte) protocol.Status {
		var h protocol.Header
		protocol.ParseHeader(resp, &h)
		return h.Status
	}
	for vb := uint16(0); vb < 8; vb++ {
		run(protocol.OpSetVBucket, vb, []byte{byte(vbucket.Active)}, nil, nil)
	}
	for i := 0; i < 200; i++ {
		key := []byte("key:" + strconv.Itoa(i))
		vb := uint16(i % 8)
		if st := status(run(protocol.OpSet, vb, make([]byte, 8), key, []byte("v"))); st != protocol.StatusOK {
			t.Fatalf("set %s: %#x", key, st)
		}
	}
	if n := s.store.VBucketItems(5); n != 25 {
		t.Fatalf("vbucket 5 holds %d items", n)
	}
	c.out = c.out[:0]
	c.mode = modeUnknown
	in := []byte("stats vbucket\r\n")
	c.rbuf, c.r, c.w = in, 0, len(in)
	c.processInput()
	stats := string(c.out)
	for _, want := range []string{"STAT vb_5 active\r\n", "STAT vb_5:items 25\r\n", "STAT vb_0 active\r\n", "END\r\n"} {
		if !strings.Contains(stats, want) {
			t.Fatalf("stats vbucket lacks %q:\n%s", want, stats)
		}
	}
	if st := status(run(protocol.OpDelVBucket, 5, nil, nil, nil)); st != protocol.StatusOK {
		t.Fatalf("DEL_VBUCKET: %#x", st)
	}
	if n := s.store.VBucketItems(5); n != 0 {
		t.Fatalf("vbucket 5 still holds %d items", n)
	}
	run(protocol.OpSetVBucket, 5, []byte{byte(vbucket.Active)}, nil, nil)
	for i := 0; i < 200; i++ {
		key := []byte("key:" + strconv.Itoa(i))
		want := protocol.StatusOK
		if i%8 == 5 {
			want = protocol.StatusKeyNotFound
		}
		if st := status(run(protocol.OpGet, uint16(i%8), nil, key, nil)); st != want {
			t.Fatalf("get %s after DEL_VBUCKET 5: %#x, want %#x", key, st, want)
		}
	}
}

// A SET_CLUSTER_CONFIG body is bounded by what a config of the node's
// vbuckets can be (maxClusterConfig): one past it is refused as too large
// without being buffered, and the connection stays in step.
func TestClusterConfigBodyBound(t *testing.T) {
	_, addr := startCluster(t, nil)
	c := dialBin(t, addr)
	limit := maxClusterConfig(testVBuckets)
	if h, _ := c.do(protocol.OpSetClusterConfig, 0, revExtras(1, 1), []byte("default"), make([]byte, limit+1)); h.Status != protocol.StatusTooLarge {
		t.Fatalf("a config of %d bytes: %#x, want too large", limit+1, h.Status)
	}
	if h, body := c.do(protocol.OpSetClusterConfig, 0, revExtras(1, 2), []byte("default"), testConfigJSON(t, 1, 2)); h.Status != protocol.StatusOK {
		t.Fatalf("then a real config: %#x %q", h.Status, body)
	}
	// A config as large as a real one can be for 65536 vbuckets and three
	// replicas fits that node's bound.
	if n := maxClusterConfig(65536); n < 3<<20/2+64<<10 {
		t.Fatalf("bound for 65536 vbuckets %d: below a 1.5 MiB config", n)
	}
}
