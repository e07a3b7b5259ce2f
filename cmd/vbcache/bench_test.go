package main

import (
	"io"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/vbcache/vbcache/internal/bench"
)

// TestBenchArgsRoundTrip checks that bench.Config.Args (used by the
// harnesses to start the load) and the flag parser agree.
func TestBenchArgsRoundTrip(t *testing.T) {
	for _, c := range []bench.Config{
		{Servers: []string{"127.0.0.1:1"}},
		{Servers: []string{"127.0.0.1:1", "127.0.0.1:2"}, Protocol: bench.Binary, Threads: 2, Clients: 7, Pipeline: 16,
			Ratio: bench.Ratio{Set: 1, Get: 0}, DataSize: 1024, KeyPrefix: "key:", KeyMin: 5, KeyMax: 999_999, KeyWidth: 7,
			Pattern: bench.Sequential, MultiGet: 1, Requests: 1000, Seed: 3, Timeout: time.Second},
		{Servers: []string{"h:3"}, Protocol: bench.Meta, DataSizeMin: 10, DataSizeMax: 20, Pattern: bench.Gaussian,
			KeyStddev: 12.5, MultiGet: 10, Duration: 1500 * time.Millisecond, Rate: 5000},
		{Servers: []string{"h:4"}, Pattern: bench.Zipf, ZipfAlpha: 0.8, KeyMax: 1_999_999},
		{Servers: []string{"h:5"}, Pattern: bench.Scan, ZipfAlpha: 1.2, ScanLength: 500, ScanEvery: 2000},
	} {
		got, _, code := parseBenchFlags(c.Args(), io.Discard, io.Discard)
		if code != -1 {
			t.Fatalf("%v: exit %d", c.Args(), code)
		}
		// The parser fills in flag defaults; compare what Args carried.
		want := c
		def, _, _ := parseBenchFlags([]string{"-s", "x:1"}, io.Discard, io.Discard)
		for _, f := range []struct {
			dst *int
			def int
		}{{&want.Clients, def.Clients}, {&want.Pipeline, def.Pipeline}, {&want.DataSize, def.DataSize}, {&want.MultiGet, def.MultiGet}} {
			if *f.dst == 0 {
				*f.dst = f.def
			}
		}
		if want.Ratio == (bench.Ratio{}) {
			want.Ratio = def.Ratio
		}
		if want.KeyPrefix == "" {
			want.KeyPrefix = def.KeyPrefix
		}
		if want.KeyMax == 0 {
			want.KeyMax = def.KeyMax
		}
		if want.Duration == 0 && want.Requests == 0 {
			want.Duration = def.Duration
		}
		if want.Timeout == 0 {
			want.Timeout = def.Timeout
		}
		if want.ZipfAlpha == 0 {
			want.ZipfAlpha = def.ZipfAlpha
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("args %s\n got %+v\nwant %+v", strings.Join(c.Args(), " "), got, want)
		}
	}
}

func TestBenchFlagErrors(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"-s", "x:1", "--protocol", "udp"},
		{"-s", "x:1", "--ratio", "1"},
		{"-s", "x:1", "--data-size-range", "5"},
		{"-s", "x:1", "--key-pattern", "zipf", "--zipf-alpha", "-0.5"},
		{"-s", "x:1", "--key-pattern", "scan", "--scan-length", "9", "--scan-every", "9"},
		{"-s", "x:1", "extra"},
	} {
		if _, _, code := parseBenchFlags(args, io.Discard, io.Discard); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
	if code := run([]string{"bench", "-h"}, io.Discard, io.Discard); code != 0 {
		t.Errorf("bench -h: exit %d", code)
	}
	if code := run([]string{"bench", "compare", "--workloads", "z"}, io.Discard, io.Discard); code != 2 {
		t.Errorf("compare with a bad workload: exit %d", code)
	}
}

// TestBenchHarnessFlags: both harness subcommands take the same shape: -h
// exits 0 with the usage on stdout, a bad flag, a stray argument or an
// unusable config exits 2 before anything runs.
func TestBenchHarnessFlags(t *testing.T) {
	for _, sub := range []string{"compare", "proxies", "hitratio"} {
		var out strings.Builder
		if code := run([]string{"bench", sub, "-h"}, &out, io.Discard); code != 0 {
			t.Errorf("bench %s -h: exit %d", sub, code)
		}
		if want := "Usage: vbcache bench " + sub + " [flags]"; !strings.HasPrefix(out.String(), want) {
			t.Errorf("bench %s -h printed %q, want it to start with %q", sub, out.String(), want)
		}
		for _, args := range [][]string{{"--bogus"}, {"extra"}, {"--workloads", "z"}, {"--rounds", "-1"}} {
			var errOut strings.Builder
			if code := run(append([]string{"bench", sub}, args...), io.Discard, &errOut); code != 2 {
				t.Errorf("bench %s %v: exit %d, want 2", sub, args, code)
			}
			if errOut.Len() == 0 {
				t.Errorf("bench %s %v: nothing on stderr", sub, args)
			}
		}
	}
}

// TestBenchCompareHitRatio: "bench compare --hit-ratio" is "bench
// hitratio", its flags included.
func TestBenchCompareHitRatio(t *testing.T) {
	var out strings.Builder
	if code := run([]string{"bench", "compare", "--hit-ratio", "-h"}, &out, io.Discard); code != 0 {
		t.Errorf("bench compare --hit-ratio -h: exit %d", code)
	}
	if want := "Usage: vbcache bench hitratio [flags]"; !strings.HasPrefix(out.String(), want) {
		t.Errorf("bench compare --hit-ratio -h printed %q, want it to start with %q", out.String(), want)
	}
	for _, args := range [][]string{{"-m", "-1"}, {"--keys", "1"}, {"--workloads", "zipf-0.8,nope"}, {"--data-size-range", "9"}} {
		var errOut strings.Builder
		if code := run(append([]string{"bench", "compare", "--hit-ratio"}, args...), io.Discard, &errOut); code != 2 {
			t.Errorf("bench compare --hit-ratio %v: exit %d, want 2", args, code)
		}
		if errOut.Len() == 0 {
			t.Errorf("bench compare --hit-ratio %v: nothing on stderr", args)
		}
	}
}

// TestBenchCompareThreadsFlags: --threads chooses the CPUs itself, so it
// refuses --server-cpu and --load-cpu beside it, and a machine with fewer
// than N+1 CPUs, before anything runs.
func TestBenchCompareThreadsFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{"--threads", "1", "--server-cpu", "0"}, "leave out --server-cpu and --load-cpu"},
		{[]string{"--threads", "1", "--load-cpu", "1"}, "leave out --server-cpu and --load-cpu"},
		{[]string{"--threads", "100000"}, "--threads 100000 needs 100001 CPUs"},
		{[]string{"--threads", "-2"}, "must not be negative"},
	} {
		var errOut strings.Builder
		if code := run(append([]string{"bench", "compare"}, tc.args...), io.Discard, &errOut); code != 2 {
			t.Errorf("bench compare %v: exit %d, want 2", tc.args, code)
		}
		if !strings.Contains(errOut.String(), tc.says) {
			t.Errorf("bench compare %v said %q, want %q", tc.args, errOut.String(), tc.says)
		}
	}
}
