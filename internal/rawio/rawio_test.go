package rawio

import (
	"io"
	"net"
	"syscall"
	"testing"
	"time"
)

// loopback returns the two ends of a TCP connection.
func loopback(t *testing.T) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server, err = ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

type counting struct{ net.Conn }

func (c counting) TransparentConn() net.Conn { return c.Conn }

type opaque struct{ net.Conn }

func TestConnLooksThroughTransparentWrappersOnly(t *testing.T) {
	_, s := loopback(t)
	if Conn(s) == nil {
		t.Fatal("plain TCP conn: nil")
	}
	if Conn(counting{s}) == nil {
		t.Fatal("transparent wrapper: nil")
	}
	if Conn(opaque{s}) != nil {
		t.Fatal("opaque wrapper: raw socket returned")
	}
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if Conn(a) != nil {
		t.Fatal("net.Pipe: raw socket returned")
	}
}

// TestFillInsideOneRawRead plays the pattern the servers use: read what is
// there, wait when nothing is, wake for the next bytes, stop at EOF. The
// writer sends each message only after the reader has announced a wait,
// so every message has to wake a waiting reader.
func TestFillInsideOneRawRead(t *testing.T) {
	c, s := loopback(t)
	rc := Conn(s)
	waiting := make(chan struct{}, 1)
	go func() {
		for _, m := range []string{"one", "two", "three"} {
			<-waiting
			c.Write([]byte(m))
		}
		<-waiting
		c.Close()
	}()
	var got []byte
	waits := 0
	var end error
	buf := make([]byte, 64)
	s.SetReadDeadline(time.Now().Add(time.Minute)) // a lost wake-up fails here, not by hanging
	err := rc.Read(func(fd uintptr) bool {
		for {
			n, wait, err := Fill(fd, buf)
			if wait {
				waits++
				select {
				case waiting <- struct{}{}:
				default:
				}
				return false
			}
			if err != nil {
				end = err
				return true
			}
			got = append(got, buf[:n]...)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != "onetwothree" || end != io.EOF {
		t.Fatalf("got %q, end %v", got, end)
	}
	if waits < 4 {
		t.Fatalf("waited %d times; each of the 3 messages and the close follow a wait", waits)
	}
}

func TestWriteReportsAFullSocket(t *testing.T) {
	_, s := loopback(t)
	rc := Conn(s)
	big := make([]byte, 64<<20) // far beyond loopback's socket buffers
	var n int
	var werr error
	rc.Write(func(fd uintptr) bool {
		n, werr = Write(fd, big)
		return true
	})
	if werr != syscall.EAGAIN || n == 0 || n >= len(big) {
		t.Fatalf("wrote %d of %d, err %v; want a partial write and EAGAIN", n, len(big), werr)
	}
}
