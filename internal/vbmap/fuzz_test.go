package vbmap

import (
	"encoding/json"
	"reflect"
	"testing"
)

// FuzzParse: Parse never panics; what it accepts obeys the map rules (so
// Active and VBucket can index it safely), and re-encoding an accepted
// config parses again to the same map.
func FuzzParse(f *testing.F) {
	seed, _ := json.Marshal(Spread([]string{"127.0.0.1:11210", "127.0.0.1:11211"}, 16))
	f.Add(seed)
	f.Add([]byte(`{"hashAlgorithm":"CRC","numReplicas":0,"serverList":["a:1"],"vBucketMap":[[0],[-1]]}`))
	f.Add([]byte(`{"rev":3,"revEpoch":1,"vBucketServerMap":{"serverList":["a:1","b:2"],"numReplicas":1,"vBucketMap":[[0,1],[1,0]],"vBucketMapForward":[[1,0],[0,1]]}}`))
	f.Add([]byte(`{"vBucketServerMap":{"serverList":[],"vBucketMap":[[5]]}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data)
		if err != nil {
			return
		}
		n := c.NumVBuckets()
		if n <= 0 || n&(n-1) != 0 {
			t.Fatalf("accepted %d vbuckets", n)
		}
		for vb := 0; vb < n; vb++ {
			if a := c.Active(vb); a < -1 || a >= len(c.VBucketServerMap.ServerList) {
				t.Fatalf("vbucket %d: active %d of %d servers", vb, a, len(c.VBucketServerMap.ServerList))
			}
		}
		if vb := VBucket(data, n); vb < 0 || vb >= n {
			t.Fatalf("VBucket = %d of %d", vb, n)
		}
		re, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		c2, err := Parse(re)
		if err != nil {
			t.Fatalf("re-encoded config rejected: %v\n%s", err, re)
		}
		if c2.NumVBuckets() != n || c2.Newer(c) || c.Newer(c2) {
			t.Fatalf("round trip changed the config")
		}
	})
}

// FuzzParseAgrees: where Parse's hand-written reader takes a config
// (parseConfig, parseRows), encoding/json reads the same config from it,
// and where encoding/json refuses one, the reader does too.
func FuzzParseAgrees(f *testing.F) {
	seed, _ := json.Marshal(Spread([]string{"127.0.0.1:11210", "127.0.0.1:11211"}, 16))
	f.Add(seed)
	f.Add([]byte(`{"rev":3,"revEpoch":1,"vBucketServerMap":{"serverList":["a:1","b:2"],"numReplicas":1,"vBucketMap":[[0,1],[1,0]],"vBucketMapForward":[[1,0],[0,1]]}}`))
	f.Add([]byte(` { "REV" : 3 , "vbucketservermap" : { "vBucketMap" : [ [ 0 , -1 ] , [ ] ] } , "vBucketServerMap" : {"numReplicas":1}, "x": [1,{"y":"]"}]} `))
	f.Add([]byte(`{"nodesExt":[{"services":{"kv":11210},"thisNode":true}],"vBucketServerMap":{"vBucketMap":[[0]],"serverList":["a\u0041:1"]},"name":"b\"\\"}`))
	f.Add([]byte(`{"vBucketServerMap":{"vBucketMap":[[01]]}}`))
	f.Add([]byte(`{"vBucketServerMap":{"vBucketMap":[[1e0]]}}`))
	f.Add([]byte(`{"vBucketServerMap":{"vBucketMap":[[1234567890]]}}`))
	f.Add([]byte(`{"vBucketServerMap":{"vBucketMap":[[1],]}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var slow Config
		slowErr := parseSlow(data, &slow)
		if r, ok := parseRows(data); ok {
			var v [][]int
			if err := json.Unmarshal(data, &v); err != nil || !reflect.DeepEqual(r, v) {
				t.Fatalf("parseRows(%q) = %v; encoding/json: %v %v", data, r, v, err)
			}
		}
		var fast Config
		if !parseConfig(data, &fast) {
			return
		}
		if slowErr != nil {
			t.Fatalf("the reader took %q, which encoding/json refuses: %v", data, slowErr)
		}
		if !reflect.DeepEqual(fast, slow) {
			t.Fatalf("%q:\nreader        %+v\nencoding/json %+v", data, fast, slow)
		}
	})
}
