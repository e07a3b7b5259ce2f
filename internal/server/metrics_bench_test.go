package server

import (
	"fmt"
	"io"
	"net"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
)

// BenchmarkScrape is one /metrics scrape of a node holding items in many
// slab classes: gathering the collector's metrics and encoding them as
// Prometheus's text format, what --metrics-listen's handler does.
func BenchmarkScrape(b *testing.B) {
	s, addr := startServer(b, nil)
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	var req strings.Builder
	for i := range 2000 {
		size := 16 << (i % 14) // values from 16 B to 128 KB: most slab classes used
		fmt.Fprintf(&req, "set k%d 0 0 %d noreply\r\n%s\r\n", i, size, strings.Repeat("x", size))
	}
	req.WriteString("version\r\n")
	if _, err := io.WriteString(nc, req.String()); err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 64)
	if _, err := io.ReadAtLeast(nc, buf, len("VERSION test\r\n")); err != nil {
		b.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(s.Metrics())
	b.ReportAllocs()
	for b.Loop() {
		mfs, err := reg.Gather()
		if err != nil {
			b.Fatal(err)
		}
		enc := expfmt.NewEncoder(io.Discard, expfmt.NewFormat(expfmt.TypeTextPlain))
		for _, mf := range mfs {
			if err := enc.Encode(mf); err != nil {
				b.Fatal(err)
			}
		}
	}
}
