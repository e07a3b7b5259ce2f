package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLocateCommand(t *testing.T) {
	var out, errb bytes.Buffer
	if rc := run([]string{"locate", "--distribution", "vbucket", "--servers", "a:11211,b:11211", "hello", "foo"}, &out, &errb); rc != 0 {
		t.Fatalf("rc %d: %s", rc, errb.String())
	}
	if out.String() != "hello a:11211 528\nfoo b:11211 115\n" {
		t.Fatalf("output:\n%s", out.String())
	}
	cfg := filepath.Join(t.TempDir(), "map.json")
	os.WriteFile(cfg, []byte(`{"rev":1,"vBucketServerMap":{"hashAlgorithm":"CRC","numReplicas":0,"serverList":["x:1","y:1"],"vBucketMap":[[1],[0],[1],[0]]}}`), 0o644)
	out.Reset()
	if rc := run([]string{"locate", "--distribution", "vbucket", "--config", cfg, "hello"}, &out, &errb); rc != 0 || out.String() != "hello y:1 0\n" {
		t.Fatalf("--config: rc %d %q %s", rc, out.String(), errb.String())
	}
	if rc := run([]string{"locate", "--distribution", "nope", "--servers", "a:1", "k"}, &out, &errb); rc != 2 {
		t.Fatalf("unknown distribution: rc %d", rc)
	}
}

func TestRehashCommand(t *testing.T) {
	var out, errb bytes.Buffer
	if rc := run([]string{"rehash", "--random", "1000"}, &out, &errb); rc != 0 {
		t.Fatalf("rc %d: %s", rc, errb.String())
	}
	for _, want := range []string{"node1,node2,node3, then node4 added", "modulo ", "ketama ", "vbucket (remap)", "vbucket (move)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	if rc := run([]string{"rehash", "--json", "--random", "0", "--keys", "x,y", "--servers", "s1,s2", "--add", "s3,s4"}, &out, &errb); rc != 0 || !strings.Contains(out.String(), `"after"`) {
		t.Fatalf("json: rc %d %s %s", rc, out.String(), errb.String())
	}
}
