package proxy

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"

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
	if !resendable(false, read) || resendable(true, read) {
		t.Error("a lost connection: a get goes again, an incr does not")
	}
	if !resendable(true, dial) {
		t.Error("a failed dial (nothing sent): an incr does not go again")
	}
}
