package proxy

import (
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// TestHalfClosedClients: a client that sends its requests and shuts down
// its side (printf … | nc -N) gets every answer and then the end of the
// stream, also when its requests and its FIN reach the proxy together.
// Many at once, so that the proxy is busy when they arrive.
func TestHalfClosedClients(t *testing.T) {
	p, addr := startProxy(t, "upstream", 1)

	const clients, rounds = 16, 25
	want := "END\r\nVERSION " + p.Version + "\r\n"
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				nc, err := net.Dial("tcp", addr)
				if err != nil {
					errs <- err
					return
				}
				nc.SetDeadline(time.Now().Add(10 * time.Second))
				io.WriteString(nc, fmt.Sprintf("get absent:%d:%d\r\nversion\r\n", i, r))
				nc.(*net.TCPConn).CloseWrite()
				b, err := io.ReadAll(nc)
				nc.Close()
				if string(b) != want || err != nil {
					errs <- fmt.Errorf("client %d round %d: %q %v", i, r, b, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
