package bench

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vbcache/vbcache/internal/tlsconf"
)

// Run performs one load run and returns its result. It dials every
// connection first (and fails if one cannot be opened), then runs them all
// until the duration, the request count or ctx ends the run, waits for the
// outstanding replies and closes the connections. Connection failures during
// the run are counted in Result.Errors, not returned.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := cfg.withDefaults()
	if c.Threads > 0 {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(c.Threads))
	}
	ks := newKeyspace(&c)
	total := c.connections() * len(c.Servers)

	conns := make([]*conn, 0, total)
	defer func() {
		for _, cn := range conns {
			cn.nc.Close()
		}
	}()
	var tlsCfg *tls.Config
	if c.TLSCA != "" {
		var err error
		if tlsCfg, err = tlsconf.LoadClient(c.TLSCA, "", ""); err != nil {
			return nil, fmt.Errorf("bench: %w", err)
		}
	}
	d := net.Dialer{Timeout: c.Timeout}
	for i := range total {
		nc, err := d.DialContext(ctx, "tcp", c.Servers[i%len(c.Servers)])
		if err != nil {
			return nil, fmt.Errorf("bench: %w", err)
		}
		if tlsCfg != nil {
			// The handshake is done before the run: its time is not
			// the requests'.
			cfg := tlsCfg.Clone()
			cfg.ServerName, _, _ = net.SplitHostPort(c.Servers[i%len(c.Servers)])
			tc := tls.Client(nc, cfg)
			hctx, cancel := context.WithTimeout(ctx, c.Timeout)
			err := tc.HandshakeContext(hctx)
			cancel()
			if err != nil {
				nc.Close()
				return nil, fmt.Errorf("bench: tls to %s: %w", c.Servers[i%len(c.Servers)], err)
			}
			nc = tc
		}
		var quota uint64
		if c.Requests > 0 {
			quota = c.Requests / uint64(total)
			if uint64(i) < c.Requests%uint64(total) {
				quota++
			}
		}
		cn, err := newConn(&c, nc, ks, newPicker(&c, i, total), quota)
		if err != nil {
			nc.Close()
			return nil, fmt.Errorf("bench: %w", err)
		}
		conns = append(conns, cn)
	}

	for _, cn := range conns {
		if err := cn.handshake(); err != nil {
			return nil, fmt.Errorf("bench: %s: first get: %w", cn.nc.RemoteAddr(), err)
		}
	}
	if c.Arrival {
		if err := awaitTimestamps(2 * time.Second); err != nil {
			return nil, err
		}
	}

	var stop atomic.Bool
	defer context.AfterFunc(ctx, func() { stop.Store(true) })()

	start := time.Now()
	var deadline time.Time
	if c.Requests == 0 {
		deadline = start.Add(c.Duration)
	}

	progressDone := make(chan struct{})
	var progressWG sync.WaitGroup
	if c.Progress != nil {
		progressWG.Add(1)
		go func() {
			defer progressWG.Done()
			progressLoop(&c, conns, start, progressDone)
		}()
	}

	var wg sync.WaitGroup
	for i, cn := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if c.Rate > 0 {
				interval := time.Duration(float64(time.Second) * float64(total) / c.Rate)
				phase := interval * time.Duration(i) / time.Duration(total)
				cn.runOpen(&stop, start, deadline, phase, interval)
			} else {
				cn.runClosed(&stop, deadline)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(progressDone)
	progressWG.Wait()

	return collect(&c, conns, elapsed), nil
}

// collect merges the connections' counters and histograms.
func collect(c *Config, conns []*conn, elapsed time.Duration) *Result {
	res := &Result{
		Protocol:    c.Protocol.String(),
		Servers:     c.Servers,
		Connections: len(conns),
		Pipeline:    c.Pipeline,
		Ratio:       c.Ratio.String(),
		MultiGet:    c.MultiGet,
		Pattern:     c.patternDesc(),
		KeyMin:      c.KeyMin,
		KeyMax:      c.KeyMax,
		Rate:        c.Rate,
		ElapsedSec:  elapsed.Seconds(),
		hist:        NewHistogram(),
	}
	if c.DataSizeMax > 0 {
		res.DataSize = fmt.Sprintf("%d-%d", c.DataSizeMin, c.DataSizeMax)
	} else {
		res.DataSize = fmt.Sprint(c.DataSize)
	}
	for _, cn := range conns {
		res.Requests += cn.st.requests.Load()
		res.Gets += cn.st.gets.Load()
		res.Sets += cn.st.sets.Load()
		res.Hits += cn.st.hits.Load()
		res.Misses += cn.st.misses.Load()
		res.Errors += cn.st.errors.Load()
		res.BytesSent += cn.st.bytesOut.Load()
		res.BytesReceived += cn.st.bytesIn.Load()
		if cn.firstErr != nil && res.FirstError == "" {
			res.FirstError = cn.firstErr.Error()
		}
		res.hist.Merge(cn.hist)
	}
	if c.Rate > 0 {
		lag := NewHistogram()
		for _, cn := range conns {
			lag.Merge(cn.lag)
		}
		res.SendLag = &Latency{}
		*res.SendLag = latencyOf(lag)
	}
	if c.Arrival {
		arr := NewHistogram()
		for _, cn := range conns {
			arr.Merge(cn.ahist)
			res.ArrivalMissing += cn.st.noArrival.Load()
		}
		res.Arrival = &Latency{}
		*res.Arrival = latencyOf(arr)
	}
	if elapsed > 0 {
		res.OpsPerSec = float64(res.Requests) / elapsed.Seconds()
	}
	res.Latency = latencyOf(res.hist)
	return res
}

// progressLoop prints a progress line once per second until done closes.
func progressLoop(c *Config, conns []*conn, start time.Time, done <-chan struct{}) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	var lastReq, lastLat uint64
	last := start
	end := "\n"
	if c.ProgressTTY {
		end = "\x1b[K\r"
	}
	for {
		select {
		case <-done:
			if c.ProgressTTY {
				fmt.Fprint(c.Progress, "\x1b[K")
			}
			return
		case now := <-t.C:
			var req, lat, hits, misses, errs uint64
			for _, cn := range conns {
				req += cn.st.requests.Load()
				lat += cn.st.latencyNs.Load()
				hits += cn.st.hits.Load()
				misses += cn.st.misses.Load()
				errs += cn.st.errors.Load()
			}
			dt := now.Sub(last).Seconds()
			var mean time.Duration
			if req > lastReq {
				mean = time.Duration((lat - lastLat) / (req - lastReq))
			}
			fmt.Fprintf(c.Progress, "[%4.0fs] %9.0f ops/s  %11d requests  avg %-8s hits %d misses %d errors %d%s",
				now.Sub(start).Seconds(), float64(req-lastReq)/dt, req, fmtDur(mean), hits, misses, errs, end)
			lastReq, lastLat, last = req, lat, now
		}
	}
}
