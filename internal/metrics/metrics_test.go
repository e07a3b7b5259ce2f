package metrics

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

func TestLinesParse(t *testing.T) {
	var l Lines
	l.Parse([]byte("STAT pid 12\r\nSTAT rusage_user 1.500000\r\nSTAT accepting_conns yes\r\nSTAT version 1.6.18\r\nEND\r\n"))
	for name, want := range map[string]float64{"pid": 12, "rusage_user": 1.5, "accepting_conns": 1} {
		if v, ok := l.Get(name); !ok || v != want {
			t.Errorf("%s: %v %v, want %v", name, v, ok, want)
		}
	}
	if _, ok := l.Get("version"); ok {
		t.Error("version read as a number")
	}
	// A second reply replaces the first: a line it lacks is absent.
	l.Parse([]byte("STAT pid 13\r\nEND\r\n"))
	if v, ok := l.Get("pid"); !ok || v != 13 {
		t.Errorf("pid after the second reply: %v %v", v, ok)
	}
	if _, ok := l.Get("rusage_user"); ok {
		t.Error("rusage_user still present after a reply without it")
	}
	if n := testing.AllocsPerRun(100, func() { l.Parse([]byte("STAT pid 14\r\nSTAT rusage_user 2.5\r\n")) }); n != 0 {
		t.Errorf("parsing known names allocated %v times", n)
	}
}

// collect runs f as a Collect and returns what it sent, written out.
func collect(t *testing.T, f func(ch chan<- prometheus.Metric)) []*dto.Metric {
	t.Helper()
	ch := make(chan prometheus.Metric, 1000)
	f(ch)
	close(ch)
	var out []*dto.Metric
	for m := range ch {
		var d dto.Metric
		if err := m.Write(&d); err != nil {
			t.Fatal(err)
		}
		out = append(out, &d)
	}
	return out
}

// A series' label pairs are made once and kept while the series is sent,
// and forgotten once it has not been sent for forgetAfter scrapes.
func TestSeriesKeptAndForgotten(t *testing.T) {
	s := NewSet()
	d := prometheus.NewDesc("x_total", "x", []string{"peer"}, nil)
	send := func(peer string, v float64) []*dto.Metric {
		s.Begin()
		return collect(t, func(ch chan<- prometheus.Metric) { s.Send(ch, d, prometheus.CounterValue, v, peer) })
	}
	a := send("a", 1)
	b := send("a", 2)
	if len(a) != 1 || len(b) != 1 || a[0].GetCounter().GetValue() != 1 || b[0].GetCounter().GetValue() != 2 {
		t.Fatalf("values: %v %v", a, b)
	}
	if a[0].Label[0] != b[0].Label[0] || a[0].Label[0].GetValue() != "a" {
		t.Fatalf("label pairs not kept: %v %v", a[0].Label, b[0].Label)
	}
	for range 2 * forgetAfter {
		send("b", 1)
	}
	if c := send("a", 3); c[0].Label[0] == a[0].Label[0] {
		t.Fatal("series a kept after 2×forgetAfter scrapes without it")
	}
	// Labels that do not fit the description are an invalid metric, as
	// with prometheus.NewConstMetric.
	ch := make(chan prometheus.Metric, 1)
	s.Send(ch, d, prometheus.CounterValue, 1, "a", "b")
	if err := (<-ch).Write(&dto.Metric{}); err == nil {
		t.Fatal("a series with two label values for one label was written")
	}
}
