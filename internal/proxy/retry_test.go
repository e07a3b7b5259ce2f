package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/vbcache/vbcache/memcache"
)

func TestNotApplied(t *testing.T) {
	dial := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	read := &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
	cases := []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("%w: key %q (vbucket %d) refused %d times", memcache.ErrNotMyVBucket, "k", 7, 5), true},
		{memcache.ErrTemporaryFailure, true},
		{memcache.ErrNoServers, true},
		{fmt.Errorf("%w: key %q (vbucket %d) failed %d times", dial, "k", 7, 5), true},
		{read, false},
		{io.ErrUnexpectedEOF, false},
		{os.ErrDeadlineExceeded, false},
		{context.DeadlineExceeded, false},
	}
	for _, c := range cases {
		if got := notApplied(c.err); got != c.want {
			t.Errorf("notApplied(%v) = %v, want %v", c.err, got, c.want)
		}
	}
	if retryable(memcache.ErrCacheMiss, false) {
		t.Error("a miss (an answer) is retryable")
	}
	if !retryable(read, false) || retryable(read, true) {
		t.Error("a lost connection: retryable for a set, not for an incr")
	}
	if !retryable(dial, true) {
		t.Error("a failed dial (nothing sent) is not retryable for an incr")
	}
}

// TestRunSendsAtMostOnce: in cluster mode a request that failed after it
// may have reached a node is sent again only when it is safe to apply
// twice.
func TestRunSendsAtMostOnce(t *testing.T) {
	u := &upstream{cluster: true, retry: 300 * time.Millisecond, timeout: time.Second, mc: memcache.New("127.0.0.1:1")}
	lost := &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
	for _, once := range []bool{true, false} {
		var rc reqCtx
		calls := 0
		err := u.run(&rc, []*srvStat{{}}, once, func(context.Context) error {
			calls++
			if calls == 1 {
				return lost
			}
			return nil
		})
		rc.stop()
		switch {
		case once && (calls != 1 || !errors.Is(err, lost)):
			t.Errorf("at most once: %d calls, err %v; want 1 call and the lost connection", calls, err)
		case !once && (calls != 2 || err != nil):
			t.Errorf("retryable: %d calls, err %v; want 2 calls and success", calls, err)
		}
	}
}
