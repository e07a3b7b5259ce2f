package vbmap

import (
	"errors"
	"testing"
)

// TestHashVectors pins the vectors of DESIGN.md §2 (checked there against
// zlib and gocbcore's cbCrc).
func TestHashVectors(t *testing.T) {
	for _, c := range []struct {
		key    string
		h      uint32
		vb1024 int
	}{
		{"hello", 13840, 528},
		{"foo", 3187, 115},
		{"key-0", 31211, 491},
	} {
		if got := Hash([]byte(c.key)); got != c.h {
			t.Errorf("Hash(%q) = %d, want %d", c.key, got, c.h)
		}
		if got := HashString(c.key); got != c.h {
			t.Errorf("HashString(%q) = %d, want %d", c.key, got, c.h)
		}
		if got := VBucketString(c.key, 1024); got != c.vb1024 {
			t.Errorf("VBucketString(%q, 1024) = %d, want %d", c.key, got, c.vb1024)
		}
		if got := VBucket([]byte(c.key), 1024); got != c.vb1024 {
			t.Errorf("VBucket(%q, 1024) = %d, want %d", c.key, got, c.vb1024)
		}
	}
}

func TestHashStringAllocs(t *testing.T) {
	if n := testing.AllocsPerRun(100, func() { HashString("some-key") }); n != 0 {
		t.Fatalf("HashString allocates %v times", n)
	}
}

// TestParseSample parses the config of reference §5.4 that gocb accepted.
func TestParseSample(t *testing.T) {
	const sample = `{
  "rev": 1, "revEpoch": 1,
  "name": "default", "uuid": "0123456789abcdef0123456789abcdef",
  "nodeLocator": "vbucket",
  "bucketCapabilities": ["cccp", "nodesExt"],
  "nodes": [
    {"hostname": "127.0.0.1:8091", "ports": {"direct": 11210}},
    {"hostname": "127.0.0.1:8091", "ports": {"direct": 11212}}
  ],
  "nodesExt": [
    {"hostname": "127.0.0.1", "services": {"kv": 11210, "mgmt": 8091}},
    {"hostname": "127.0.0.1", "services": {"kv": 11212, "mgmt": 8091}}
  ],
  "vBucketServerMap": {
    "hashAlgorithm": "CRC", "numReplicas": 1,
    "serverList": ["127.0.0.1:11210", "127.0.0.1:11212"],
    "vBucketMap": [[0, 1], [1, 0], [0, -1], [1, 0]]
  }
}`
	c, err := Parse([]byte(sample))
	if err != nil {
		t.Fatal(err)
	}
	if c.NumVBuckets() != 4 || c.Active(1) != 1 || c.Rev != 1 || c.NodesExt[1].Services["kv"] != 11212 || c.Nodes[0].Ports.Direct != 11210 {
		t.Fatalf("parsed %+v", c)
	}
	// Without the envelope (libvbucket accepts a bare map).
	bare, err := Parse([]byte(`{"hashAlgorithm":"CRC","numReplicas":0,"serverList":["a:1"],"vBucketMap":[[0],[0]]}`))
	if err != nil || bare.NumVBuckets() != 2 {
		t.Fatalf("bare map: %v %+v", err, bare)
	}
}

func TestParseInvalid(t *testing.T) {
	for name, js := range map[string]string{
		"not-pow2":      `{"vBucketServerMap":{"numReplicas":0,"serverList":["a:1"],"vBucketMap":[[0],[0],[0]]}}`,
		"empty-servers": `{"vBucketServerMap":{"numReplicas":0,"serverList":[],"vBucketMap":[[0]]}}`,
		"row-len":       `{"vBucketServerMap":{"numReplicas":1,"serverList":["a:1"],"vBucketMap":[[0]]}}`,
		"bad-index":     `{"vBucketServerMap":{"numReplicas":0,"serverList":["a:1"],"vBucketMap":[[1]]}}`,
		"hash":          `{"vBucketServerMap":{"hashAlgorithm":"MD5","numReplicas":0,"serverList":["a:1"],"vBucketMap":[[0]]}}`,
		"forward-rows":  `{"vBucketServerMap":{"numReplicas":0,"serverList":["a:1"],"vBucketMap":[[0]],"vBucketMapForward":[[0],[0]]}}`,
	} {
		if _, err := Parse([]byte(js)); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrInvalid", name, err)
		}
	}
	if _, err := Parse([]byte(`{`)); err == nil {
		t.Error("truncated JSON parsed")
	}
}

func TestNewer(t *testing.T) {
	a := &Config{Rev: 5, RevEpoch: 1}
	b := &Config{Rev: 1, RevEpoch: 2}
	if !b.Newer(a) || a.Newer(b) || a.Newer(a) {
		t.Fatal("Newer must order by (revEpoch, rev)")
	}
}
