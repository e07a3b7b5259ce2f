package proxy

import (
	"io"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/vbcache/vbcache/internal/protocol"
)

// TestCloseWhileClientFloods: Close returns while a binary client sends
// requests without pause and reads the answers. (When a goroutine of its
// own served such a client, inside the socket's RawConn read callback,
// which net.Conn.Close waits for, the callback left only when a read
// found nothing, which never happens to a client that keeps the socket's
// queue full, and Close hung.)
func TestCloseWhileClientFloods(t *testing.T) {
	p, addr := startProxy(t, "upstream", 1)
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	// Quiet gets of a missing key: each costs the proxy an upstream round
	// trip and answers nothing, so the client outpaces the proxy and the
	// socket's queue stays full.
	version := protocol.AppendRequest(nil, &protocol.Request{Header: protocol.Header{Opcode: protocol.OpVersion}})
	getq := protocol.AppendRequest(nil, &protocol.Request{Header: protocol.Header{Opcode: protocol.OpGetQ}, Key: []byte("absent")})
	batch := make([]byte, 0, 64<<10)
	for len(batch)+len(getq) <= cap(batch) {
		batch = append(batch, getq...)
	}
	if _, err := nc.Write(version); err != nil {
		t.Fatal(err)
	}
	answered := make(chan struct{})
	go func() { // the reader: ends when the proxy closes the socket
		var b [protocol.HeaderLen]byte
		if _, err := io.ReadFull(nc, b[:]); err == nil {
			close(answered)
		}
		io.Copy(io.Discard, nc)
	}()
	go func() { // the writer: ends when the socket fails
		for {
			if _, err := nc.Write(batch); err != nil {
				return
			}
		}
	}()
	select {
	case <-answered: // the connection is being served
	case <-time.After(10 * time.Second):
		t.Fatal("no answer from the proxy")
	}
	// Well into the flood: the client is far ahead of the proxy.
	for deadline := time.Now().Add(10 * time.Second); p.ctr.cmdGet.Load() < 20000; {
		if time.Now().After(deadline) {
			t.Fatalf("the proxy served %d gets in 10 s", p.ctr.cmdGet.Load())
		}
		runtime.Gosched()
	}
	closed := make(chan struct{})
	go func() {
		p.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return while a client kept sending")
	}
}
