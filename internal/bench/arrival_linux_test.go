//go:build linux && (amd64 || arm64 || riscv64 || ppc64le || s390x || loong64)

package bench

import (
	"encoding/binary"
	"syscall"
	"testing"
	"time"
)

// cmsg builds one control message as the 64-bit Linux ports lay it out.
func cmsg(level, typ int32, data []byte) []byte {
	b := make([]byte, cmsgAlign(16+len(data)))
	binary.NativeEndian.PutUint64(b[0:8], uint64(16+len(data)))
	binary.NativeEndian.PutUint32(b[8:12], uint32(level))
	binary.NativeEndian.PutUint32(b[12:16], uint32(typ))
	copy(b[16:], data)
	return b
}

// shortLen claims a length below the header's own.
func shortLen(b []byte) []byte {
	binary.NativeEndian.PutUint64(b[0:8], 8)
	return b
}

func TestParseTimestampNS(t *testing.T) {
	ts := make([]byte, 16)
	binary.NativeEndian.PutUint64(ts[0:8], 1700000000)
	binary.NativeEndian.PutUint64(ts[8:16], 123456789)
	other := cmsg(syscall.SOL_IP, 8, []byte{1, 2, 3, 4, 5}) // a message of another kind, padded
	both := append(append([]byte{}, other...), cmsg(syscall.SOL_SOCKET, syscall.SCM_TIMESTAMPNS, ts)...)

	if got, ok := parseTimestampNS(both); !ok || got != 1700000000*1e9+123456789 {
		t.Errorf("after another message: %d %v", got, ok)
	}
	for name, b := range map[string][]byte{
		"none":      nil,
		"other":     other,
		"truncated": both[:len(both)-4],
		"short len": shortLen(cmsg(syscall.SOL_SOCKET, syscall.SCM_TIMESTAMPNS, ts)),
	} {
		if got, ok := parseTimestampNS(b); ok {
			t.Errorf("%s: found %d", name, got)
		}
	}
}

// TestRunArrival drives a real node with receive timestamps on, pipelined
// so that replies share reads: every reply gets an arrival time, and since
// a reply arrives before it is parsed, each quantile of the arrival
// latency is at most the same quantile of the parse latency.
func TestRunArrival(t *testing.T) {
	if err := awaitTimestamps(2 * time.Second); err != nil {
		t.Fatal(err)
	}
	addr := startNode(t)
	r := mustRun(t, Config{Servers: []string{addr}, Clients: 4, Pipeline: 8, Ratio: Ratio{Set: 1, Get: 1},
		Requests: 4000, Arrival: true, Timeout: 10 * time.Second})
	a, l := r.Arrival, r.Latency
	if a == nil {
		t.Fatal("no arrival figures")
	}
	if r.ArrivalMissing != 0 {
		t.Errorf("%d replies without a timestamp", r.ArrivalMissing)
	}
	if a.Min <= 0 || a.Max <= 0 {
		t.Errorf("arrival min %v max %v: want real durations", a.Min, a.Max)
	}
	for _, q := range []struct {
		name     string
		arr, lat float64
	}{{"p50", a.P50, l.P50}, {"p90", a.P90, l.P90}, {"p99", a.P99, l.P99}, {"max", a.Max, l.Max}} {
		if q.arr > q.lat {
			t.Errorf("%s: arrival %.1fµs after the parse %.1fµs", q.name, q.arr, q.lat)
		}
	}
	if got := (&Config{Arrival: true}).Args(); len(got) != 1 || got[0] != "--arrival" {
		t.Errorf("Args: %q", got)
	}
}
