package main

import (
	"errors"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metricsServer serves a process's Prometheus metrics at /metrics of addr
// (--metrics-listen): the collectors given, then Go's runtime and the
// process's own (process_cpu_seconds_total, process_resident_memory_bytes
// and the rest). Every collector reads at scrape time what the process
// already counts, so serving them costs the request path nothing. The
// returned server's Serve runs on a goroutine it owns until Close.
func metricsServer(addr string, cs ...prometheus.Collector) (*http.Server, net.Addr, error) {
	reg := prometheus.NewRegistry()
	cs = append(cs, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, nil, err
		}
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { // owned by hs: Close ends it
		if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			ln.Close()
		}
	}()
	return hs, ln.Addr(), nil
}
