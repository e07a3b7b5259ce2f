package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestRunExitCodes(t *testing.T) {
	tests := []struct {
		args      []string
		code      int
		out, err  string // substrings expected in stdout / stderr
		notInHelp []string
	}{
		{args: nil, code: 2, err: "Usage: vbcache <command>"},
		{args: []string{"-h"}, code: 0, out: "server"},
		{args: []string{"help"}, code: 0, out: "version"},
		{args: []string{"bogus"}, code: 2, err: `unknown command "bogus"`},
		{args: []string{"version"}, code: 0, out: "vbcache "},
		{args: []string{"server", "-V"}, code: 0, out: "vbcache "},
		{args: []string{"server", "-c", "0"}, code: 1, err: "Maximum connections must be greater than 0\n"},
		{args: []string{"server", "-I", "256m"}, code: 64, err: "Cannot set item size limit higher than 1/2 of memory max.\n"},
		{args: []string{"help", "server"}, code: 0, out: "--unix-socket",
			// memcached's test harness greps -h for these to decide
			// which suites to run; vbcache must not claim them.
			notInHelp: []string{"ext_path", "proxy_config", "no_drop_privileges"}},
		// ... and for these, which vbcache supports.
		{args: []string{"server", "-h"}, code: 0, out: "--enable-sasl"},
		{args: []string{"server", "-h"}, code: 0, out: "--enable-ssl"},
		{args: []string{"server", "-h"}, code: 0, out: "-o, --extended"},
	}
	for _, tt := range tests {
		var stdout, stderr bytes.Buffer
		code := run(tt.args, &stdout, &stderr)
		if code != tt.code {
			t.Errorf("%q: exit %d, want %d (stderr %q)", tt.args, code, tt.code, stderr.String())
		}
		if !strings.Contains(stdout.String(), tt.out) {
			t.Errorf("%q: stdout %q lacks %q", tt.args, stdout.String(), tt.out)
		}
		if !strings.Contains(stderr.String(), tt.err) {
			t.Errorf("%q: stderr %q lacks %q", tt.args, stderr.String(), tt.err)
		}
		for _, s := range tt.notInHelp {
			if strings.Contains(strings.ToLower(stdout.String()), s) {
				t.Errorf("%q: output mentions %q", tt.args, s)
			}
		}
	}
}
