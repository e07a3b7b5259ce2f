//go:build !(linux && (amd64 || arm64 || riscv64 || ppc64le || s390x || loong64))

package bench

import (
	"io"
	"net"
	"sync/atomic"
	"time"
)

// arrivalReader is Linux's (arrival_linux.go); elsewhere Config.Arrival
// fails at the start of a run.
type arrivalReader struct {
	io.Reader
	last int64
}

func newArrivalReader(net.Conn, *atomic.Uint64) (*arrivalReader, error) { return nil, errNoArrival }

func awaitTimestamps(time.Duration) error { return errNoArrival }
