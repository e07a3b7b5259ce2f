package server

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/vbcache/vbcache/internal/protocol"
	"github.com/vbcache/vbcache/internal/sasl"
)

func features(fs ...protocol.HelloFeature) []byte {
	var b []byte
	for _, f := range fs {
		b = binary.BigEndian.AppendUint16(b, uint16(f))
	}
	return b
}

// gocbcoreHello is the feature list gocb v2.11 / gocbcore v10.8 sends.
var gocbcoreHello = features(0x02, 0x06, 0x08, 0x1e, 0x1d, 0x0c, 0x07, 0x0b, 0x04, 0x0a,
	0x13, 0x0f, 0x12, 0x0e, 0x1f, 0x10, 0x17, 0x19, 0x14, 0x1c, 0x11)

func TestHelloAcknowledgesImplementedFeatures(t *testing.T) {
	_, addr := startCluster(t, nil)
	b := dialBin(t, addr)
	for _, tc := range []struct {
		name      string
		req, want []byte
	}{
		{"none", nil, nil},
		{"gocbcore", gocbcoreHello, features(protocol.FeatureSelectBucket)},
		{"tcpnodelay", features(protocol.FeatureTCPNoDelay, protocol.FeatureXerror, protocol.FeatureSelectBucket),
			features(protocol.FeatureTCPNoDelay, protocol.FeatureSelectBucket)},
		{"order and duplicates", features(protocol.FeatureSelectBucket, protocol.FeatureCollections,
			protocol.FeatureTCPNoDelay, protocol.FeatureSelectBucket, protocol.FeatureTCPNoDelay),
			features(protocol.FeatureSelectBucket, protocol.FeatureTCPNoDelay)},
		{"unknown codes", features(0x7777, 0xffff), nil},
	} {
		agent := []byte(`{"a":"test agent","i":"` + strings.Repeat("x", 300) + `"}`)
		h, body := b.do(protocol.OpHello, 0, nil, agent, tc.req)
		if h.Status != protocol.StatusOK || h.KeyLen != 0 || h.ExtLen != 0 || !bytes.Equal(body, tc.want) {
			t.Errorf("%s: HELLO = status %#x key %d extras %d body %x, want OK %x", tc.name, h.Status, h.KeyLen, h.ExtLen, body, tc.want)
		}
	}
	// Bad requests answer Invalid arguments and keep the connection in
	// step.
	for _, tc := range []struct {
		name          string
		extras, value []byte
	}{
		{"odd length", nil, []byte{0, 3, 0}},
		{"extras", []byte{0, 0, 0, 0}, features(protocol.FeatureTCPNoDelay)},
		{"too many", nil, make([]byte, 2*maxHelloFeatures+2)},
	} {
		h, body := b.do(protocol.OpHello, 0, tc.extras, nil, tc.value)
		if h.Status != protocol.StatusInvalid {
			t.Errorf("%s: HELLO = status %#x %q, want Invalid arguments", tc.name, h.Status, body)
		}
	}
	if h, _ := b.do(protocol.OpNoop, 0, nil, nil, nil); h.Status != protocol.StatusOK || h.Opcode != protocol.OpNoop {
		t.Fatalf("NOOP after bad HELLOs: %+v", h)
	}
}

func TestHelloNoTCPNoDelayOnUnixSocket(t *testing.T) {
	sock := t.TempDir() + "/vbcache.sock"
	s, _ := startServer(t, func(c *Config) {
		c.VBuckets = testVBuckets
		c.UnixSocket = sock
	})
	if n := s.Addrs()[0].Network(); n != "unix" {
		t.Fatalf("listening on %s", n)
	}
	b := dialBinNet(t, "unix", sock)
	h, body := b.do(protocol.OpHello, 0, nil, nil, features(protocol.FeatureTCPNoDelay, protocol.FeatureSelectBucket))
	if h.Status != protocol.StatusOK || !bytes.Equal(body, features(protocol.FeatureSelectBucket)) {
		t.Fatalf("HELLO on a unix socket = %#x %x", h.Status, body)
	}
}

func TestSelectBucket(t *testing.T) {
	_, addr := startCluster(t, nil)
	b := dialBin(t, addr)
	if h, body := b.do(protocol.OpSelectBucket, 0, nil, []byte("default"), nil); h.Status != protocol.StatusOK || len(body) != 0 {
		t.Errorf("SELECT_BUCKET default = %#x %q", h.Status, body)
	}
	if h, body := b.do(protocol.OpSelectBucket, 0, nil, []byte("travel-sample"), nil); h.Status != protocol.StatusKeyNotFound || string(body) != "Not found" {
		t.Errorf("SELECT_BUCKET travel-sample = %#x %q, want KEY_ENOENT", h.Status, body)
	}
	for _, tc := range []struct {
		name               string
		extras, key, value []byte
	}{
		{"no key", nil, nil, nil},
		{"extras", []byte{1, 2, 3, 4}, []byte("default"), nil},
		{"value", nil, []byte("default"), []byte("x")},
	} {
		if h, _ := b.do(protocol.OpSelectBucket, 0, tc.extras, tc.key, tc.value); h.Status != protocol.StatusInvalid {
			t.Errorf("%s: SELECT_BUCKET = %#x, want Invalid arguments", tc.name, h.Status)
		}
	}
	if h, _ := b.do(protocol.OpNoop, 0, nil, nil, nil); h.Status != protocol.StatusOK {
		t.Fatalf("NOOP: %#x", h.Status)
	}
}

func TestGetErrorMapUnknown(t *testing.T) {
	_, addr := startCluster(t, nil)
	b := dialBin(t, addr)
	h, body := b.do(protocol.OpGetErrorMap, 0, nil, nil, []byte{0, 2})
	if h.Status != protocol.StatusUnknown || string(body) != "Unknown command" {
		t.Fatalf("GET_ERROR_MAP = %#x %q", h.Status, body)
	}
	if h, _ := b.do(protocol.OpNoop, 0, nil, nil, nil); h.Status != protocol.StatusOK {
		t.Fatalf("NOOP: %#x", h.Status)
	}
}

func TestBootstrapOpcodesStandaloneUnknown(t *testing.T) {
	_, addr := startServer(t, nil)
	b := dialBin(t, addr)
	for _, op := range []protocol.Opcode{protocol.OpHello, protocol.OpSelectBucket, protocol.OpGetErrorMap} {
		h, body := b.do(op, 0, nil, []byte("default"), features(protocol.FeatureSelectBucket))
		if h.Status != protocol.StatusUnknown || string(body) != "Unknown command" {
			t.Errorf("standalone opcode %#x = %#x %q, want Unknown command", op, h.Status, body)
		}
	}
}

// TestBootstrapBeforeSASL pipelines what gocbcore sends on a new
// connection: HELLO and GET_ERROR_MAP are answered before
// authentication, SELECT_BUCKET only after it.
func TestBootstrapBeforeSASL(t *testing.T) {
	_, addr := startCluster(t, func(c *Config) {
		c.SASL = true
		c.SASLPasswords = &sasl.Passwords{Current: map[string]string{"u": "p"}}
	})
	b := dialBin(t, addr)
	b.send(protocol.OpHello, 0, nil, []byte("agent"), gocbcoreHello)
	b.send(protocol.OpGetErrorMap, 0, nil, nil, []byte{0, 2})
	b.send(protocol.OpSASLList, 0, nil, nil, nil)
	b.send(protocol.OpSASLAuth, 0, nil, []byte("PLAIN"), []byte("\x00u\x00p"))
	b.send(protocol.OpSelectBucket, 0, nil, []byte("default"), nil)
	b.send(protocol.OpGetClusterConfig, 0, nil, nil, nil)
	want := []struct {
		op protocol.Opcode
		st protocol.Status
	}{
		{protocol.OpHello, protocol.StatusOK},
		{protocol.OpGetErrorMap, protocol.StatusUnknown},
		{protocol.OpSASLList, protocol.StatusOK},
		{protocol.OpSASLAuth, protocol.StatusOK},
		{protocol.OpSelectBucket, protocol.StatusOK},
		{protocol.OpGetClusterConfig, protocol.StatusOK},
	}
	for _, w := range want {
		h, body := b.read()
		if h.Opcode != w.op || h.Status != w.st {
			t.Fatalf("reply %#x %#x %q, want opcode %#x status %#x", h.Opcode, h.Status, body, w.op, w.st)
		}
	}

	// SELECT_BUCKET before authentication is refused and closes the
	// connection, like every other command.
	b = dialBin(t, addr)
	h, _ := b.do(protocol.OpSelectBucket, 0, nil, []byte("default"), nil)
	if h.Status != protocol.StatusAuthError {
		t.Fatalf("SELECT_BUCKET before auth = %#x, want auth error", h.Status)
	}
	if _, err := b.r.ReadByte(); err != io.EOF {
		t.Fatalf("after refused SELECT_BUCKET: %v, want EOF", err)
	}
}

// TestHelloBeforeSASLStandalone: without cluster mode the SASL gate is
// memcached's: HELLO is refused and the connection closed.
func TestHelloBeforeSASLStandalone(t *testing.T) {
	_, addr := startServer(t, func(c *Config) {
		c.SASL = true
		c.SASLPasswords = &sasl.Passwords{Current: map[string]string{"u": "p"}}
	})
	b := dialBin(t, addr)
	h, _ := b.do(protocol.OpHello, 0, nil, nil, nil)
	if h.Status != protocol.StatusAuthError {
		t.Fatalf("HELLO before auth = %#x, want auth error", h.Status)
	}
}

// dialBinNet is dialBin on any network.
func dialBinNet(t testing.TB, network, addr string) *binClient {
	t.Helper()
	nc, err := net.Dial(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	return &binClient{t: t, nc: nc, r: bufio.NewReader(nc)}
}
