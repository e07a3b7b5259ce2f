package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"
)

// Result is the outcome of one Run. Its JSON form is what "vbcache bench
// --json" prints and what the harnesses read back.
type Result struct {
	Protocol      string   `json:"protocol"`
	Servers       []string `json:"servers"`
	Connections   int      `json:"connections"` // over all servers
	Pipeline      int      `json:"pipeline"`
	Ratio         string   `json:"ratio"` // set:get
	MultiGet      int      `json:"multi_get"`
	DataSize      string   `json:"data_size"` // bytes, "n" or "min-max"
	Pattern       string   `json:"key_pattern"`
	KeyMin        uint64   `json:"key_min"`
	KeyMax        uint64   `json:"key_max"`
	Rate          float64  `json:"rate,omitempty"` // open loop: requests/s asked for
	ElapsedSec    float64  `json:"elapsed_s"`
	Requests      uint64   `json:"requests"` // answered
	Gets          uint64   `json:"gets"`
	Sets          uint64   `json:"sets"`
	Hits          uint64   `json:"hits"`   // keys
	Misses        uint64   `json:"misses"` // keys
	Errors        uint64   `json:"errors"`
	FirstError    string   `json:"first_error,omitempty"`
	BytesSent     uint64   `json:"bytes_sent"`
	BytesReceived uint64   `json:"bytes_received"`
	OpsPerSec     float64  `json:"ops_per_sec"`
	Latency       Latency  `json:"latency_us"`
	// SendLag (open loop only) is how late the generator sent requests
	// relative to their schedule. Latency already includes it; a large
	// lag means the generator, not the server, fell behind.
	SendLag *Latency `json:"send_lag_us,omitempty"`
	// Arrival (Config.Arrival only) is latency measured to the kernel's
	// receive time of each reply's last bytes instead of to its parse:
	// it leaves out the time a reply waited in the socket buffer for the
	// generator to read it.
	Arrival *Latency `json:"arrival_us,omitempty"`
	// ArrivalMissing counts the replies left out of Arrival because the
	// read that brought them carried no kernel timestamp.
	ArrivalMissing uint64 `json:"arrival_missing,omitempty"`

	hist *Histogram // merged latencies (not in JSON)
}

// Latency holds latency figures in microseconds.
type Latency struct {
	Min   float64 `json:"min"`
	Mean  float64 `json:"mean"`
	P50   float64 `json:"p50"`
	P90   float64 `json:"p90"`
	P99   float64 `json:"p99"`
	P999  float64 `json:"p99.9"`
	P9999 float64 `json:"p99.99"`
	Max   float64 `json:"max"`
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

func latencyOf(h *Histogram) Latency {
	return Latency{
		Min: us(h.Min()), Mean: us(h.Mean()),
		P50: us(h.Percentile(50)), P90: us(h.Percentile(90)), P99: us(h.Percentile(99)),
		P999: us(h.Percentile(99.9)), P9999: us(h.Percentile(99.99)), Max: us(h.Max()),
	}
}

// Histogram returns the merged latency histogram (nil for a Result read
// back from JSON).
func (r *Result) Histogram() *Histogram { return r.hist }

// WriteJSON writes r as indented JSON.
func (r *Result) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteText writes a human summary of r.
func (r *Result) WriteText(w io.Writer) error {
	var b strings.Builder
	mode := "closed loop"
	if r.Rate > 0 {
		mode = fmt.Sprintf("open loop at %.0f req/s (latency from the scheduled send time)", r.Rate)
	}
	fmt.Fprintf(&b, "%s protocol, %s, %d connections, pipeline %d, set:get %s, multi-get %d, %s-byte values, keys %d-%d %s, %s\n",
		r.Protocol, strings.Join(r.Servers, " "), r.Connections, r.Pipeline, r.Ratio, r.MultiGet,
		r.DataSize, r.KeyMin, r.KeyMax, r.Pattern, mode)
	fmt.Fprintf(&b, "  duration   %.2f s\n", r.ElapsedSec)
	fmt.Fprintf(&b, "  requests   %d (%.0f ops/s): %d gets, %d sets\n", r.Requests, r.OpsPerSec, r.Gets, r.Sets)
	hitPct := 0.0
	if r.Hits+r.Misses > 0 {
		hitPct = 100 * float64(r.Hits) / float64(r.Hits+r.Misses)
	}
	fmt.Fprintf(&b, "  keys       %d hits, %d misses (%.1f%% hits)\n", r.Hits, r.Misses, hitPct)
	fmt.Fprintf(&b, "  errors     %d", r.Errors)
	if r.FirstError != "" {
		fmt.Fprintf(&b, " (first: %s)", r.FirstError)
	}
	b.WriteString("\n")
	fmt.Fprintf(&b, "  bytes      %s sent, %s received\n", fmtBytes(r.BytesSent), fmtBytes(r.BytesReceived))
	l := r.Latency
	d := func(v float64) string { return fmtDur(time.Duration(v * float64(time.Microsecond))) }
	fmt.Fprintf(&b, "  latency    min %s  mean %s  p50 %s  p90 %s  p99 %s  p99.9 %s  p99.99 %s  max %s\n",
		d(l.Min), d(l.Mean), d(l.P50), d(l.P90), d(l.P99), d(l.P999), d(l.P9999), d(l.Max))
	if a := r.Arrival; a != nil {
		fmt.Fprintf(&b, "  arrival    min %s  mean %s  p50 %s  p90 %s  p99 %s  p99.9 %s  p99.99 %s  max %s (to the kernel's receive time)\n",
			d(a.Min), d(a.Mean), d(a.P50), d(a.P90), d(a.P99), d(a.P999), d(a.P9999), d(a.Max))
		if r.ArrivalMissing > 0 {
			fmt.Fprintf(&b, "             %d replies came without a kernel timestamp and are not in it\n", r.ArrivalMissing)
		}
	}
	if s := r.SendLag; s != nil {
		fmt.Fprintf(&b, "  send lag   p50 %s  p99 %s  max %s (included in the latency above)\n", d(s.P50), d(s.P99), d(s.Max))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// fmtDur prints a duration with three significant digits in µs, ms or s.
func fmtDur(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return fmt.Sprintf("%.1fµs", us(d))
	case d < time.Second:
		return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond))
	}
	return fmt.Sprintf("%.2fs", d.Seconds())
}

func fmtBytes(n uint64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.2f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.2f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
