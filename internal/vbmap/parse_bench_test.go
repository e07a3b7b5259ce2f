package vbmap

import (
	"encoding/json"
	"fmt"
	"testing"
)

// benchConfig is a 1024-vbucket config with one replica, four servers
// and a forward map: the map a rebalance pushes to every node per move.
func benchConfig(tb testing.TB) []byte {
	tb.Helper()
	c := &Config{Rev: 1234, RevEpoch: 1, Name: "default"}
	m := &c.VBucketServerMap
	m.HashAlgorithm, m.NumReplicas = "CRC", 1
	for i := range 4 {
		m.ServerList = append(m.ServerList, fmt.Sprintf("127.0.0.1:%d", 11213+i))
	}
	for vb := range 1024 {
		m.VBucketMap = append(m.VBucketMap, []int{vb % 3, (vb + 1) % 3})
		m.VBucketMapForward = append(m.VBucketMapForward, []int{vb % 4, (vb + 1) % 4})
	}
	b, err := json.Marshal(c)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

func BenchmarkParse(b *testing.B) {
	data := benchConfig(b)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(data); err != nil {
			b.Fatal(err)
		}
	}
}
