package proxy

import (
	"bufio"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// wrapped is a net.Conn the loops cannot poll: not a plain socket, and
// not a transparent wrapper of one (as a TLS connection will be).
type wrapped struct{ net.Conn }

type wrappingListener struct{ net.Listener }

func (l wrappingListener) Accept() (net.Conn, error) {
	nc, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return wrapped{nc}, nil
}

// TestBridgedClient: a client whose connection is not a plain socket is
// served through a socketpair by a loop like any other: its requests are
// forwarded and answered in order, its half-close ends its connection
// once its replies are written, and Close ends a bridged client that is
// still connected.
func TestBridgedClient(t *testing.T) {
	p, _ := startProxy(t, "upstream", 2)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go p.Serve(wrappingListener{ln})
	addr := ln.Addr().String()

	// A pipelined write, then a half-close: every answer, then EOF.
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	before := statValue(t, addr, "proxy_fast_path")
	io.WriteString(nc, "set br:a 0 0 1\r\n1\r\nset br:b 0 0 1\r\n2\r\nget br:a br:b\r\nbogus\r\n")
	nc.(*net.TCPConn).CloseWrite()
	all, err := io.ReadAll(nc)
	want := "STORED\r\nSTORED\r\nVALUE br:a 0 1\r\n1\r\nVALUE br:b 0 1\r\n2\r\nEND\r\nERROR\r\n"
	if err != nil || string(all) != want {
		t.Fatalf("bridged client: %q, %v; want %q", all, err, want)
	}
	if n := statValue(t, addr, "proxy_fast_path") - before; n != 3 {
		t.Errorf("the loops served %d of the 3 forwarded requests", n)
	}

	// A client still connected when the proxy closes: its connection ends.
	idle, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	idle.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(idle, "version\r\n")
	if l, err := bufio.NewReader(idle).ReadString('\n'); err != nil || !strings.HasPrefix(l, "VERSION ") {
		t.Fatalf("version: %q %v", l, err)
	}
	done := make(chan struct{})
	go func() { p.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return with a bridged client connected")
	}
	if _, err := idle.Read(make([]byte, 1)); err == nil {
		t.Error("the bridged client's connection is still open after Close")
	}
}
