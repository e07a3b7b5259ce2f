package main

import (
	"io"
	"strings"
	"testing"

	"github.com/vbcache/vbcache/internal/server"
	"github.com/vbcache/vbcache/internal/server/servertest"
)

// startClusterNode runs an in-process cluster-mode node on a real socket.
func startClusterNode(t *testing.T, vbuckets int) string {
	t.Helper()
	cfg := server.Config{Version: "test", VBuckets: vbuckets}
	return servertest.Start(t, cfg)
}

// TestMovecheckCommand runs "vbcache movecheck --init" against two nodes:
// it sets the cluster up, moves the vbucket and reports no violation.
func TestMovecheckCommand(t *testing.T) {
	nodes := startClusterNode(t, 32) + "," + startClusterNode(t, 32)
	for _, mover := range []string{"managed", "takeover"} {
		var out, errOut strings.Builder
		code := run([]string{"movecheck", "--nodes", nodes, "--vbucket", "7", "--moves", "4", "--writers", "2", "--keys", "4",
			"--init", "--num-vbuckets", "32", "--mover", mover, "-v"}, &out, &errOut)
		if code != 0 {
			t.Fatalf("--mover %s: exit %d\nstdout:\n%s\nstderr:\n%s", mover, code, out.String(), errOut.String())
		}
		for _, want := range []string{"moves: 4 done, 0 failed", "violations: none", "move 3:"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("--mover %s: output lacks %q:\n%s", mover, want, out.String())
			}
		}
		// The first run set the cluster up; the second leaves it alone.
		if mover == "takeover" && !strings.Contains(out.String(), "init: a node already has a cluster config") {
			t.Errorf("second --init did not leave the cluster alone:\n%s", out.String())
		}
	}
}

func TestMovecheckFlagErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--vbucket", "1"}, "at least two nodes"},
		{[]string{"--nodes", "a:1,b:2"}, "--vbucket is required"},
		{[]string{"--nodes", "a:1,b:2", "--vbucket", "1", "--moves", "0"}, "--moves must be positive"},
		{[]string{"--nodes", "a:1,b:2", "--vbucket", "1", "--mover", "teleport"}, "--mover"},
		{[]string{"--nodes", "a:1,b:2", "--vbucket", "1", "--init", "--num-vbuckets", "100"}, "not a power of two"},
		{[]string{"--nodes", "a:1,b:2", "--vbucket", "64", "--init", "--num-vbuckets", "64"}, "out of range"},
		{[]string{"--nodes", "a:1,b:2", "--vbucket", "1", "extra"}, "unexpected argument"},
		{[]string{"--bogus"}, "flag provided but not defined"},
	} {
		var errOut strings.Builder
		if code := runMovecheck(c.args, io.Discard, &errOut); code != 2 || !strings.Contains(errOut.String(), c.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", c.args, code, errOut.String(), c.want)
		}
	}
	var out strings.Builder
	if code := runMovecheck([]string{"-h"}, &out, &out); code != 0 || !strings.Contains(out.String(), "--init") {
		t.Errorf("-h: exit %d\n%s", code, out.String())
	}
}

// TestMovecheckUnreachable: a cluster that cannot be reached is a run
// error (exit 1), not a pass.
func TestMovecheckUnreachable(t *testing.T) {
	var out, errOut strings.Builder
	code := runMovecheck([]string{"--nodes", "127.0.0.1:1,127.0.0.1:2", "--vbucket", "1"}, &out, &errOut)
	if code != 1 || !strings.Contains(errOut.String(), "vbcache movecheck:") {
		t.Errorf("exit %d, stderr %q", code, errOut.String())
	}
}
