package proxy

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/vbcache/vbcache/internal/admin"
)

// Server connections that need TLS or a SASL login (Config.Upstream)
// cannot be a raw socket the loop writes to: the loop polls one end of a
// socketpair, as it polls any server socket, and a goroutine joins the
// other end to a connection that dialUp made (TLS handshake with the
// cluster's CA; a SCRAM login for binary connections, memcached's text
// token for text ones, the node fixing a connection's protocol by its
// first byte). The loop writes its
// requests into the pair at once; they wait in the pair's buffer until
// the login is done. A dial that fails is recorded in the bridge before
// its end closes, so the loop fails the requests with the dial's error,
// which proves they reached no server (notApplied): the requests of a
// cluster go again, as after a refused connect.

// upBridge is the state one bridged server connection shares with its
// goroutine.
type upBridge struct {
	err atomic.Pointer[error] // set once, before the far end closes, when the dial failed
}

// connectBridged connects up through a bridge to its server, reached
// and logged in as cr says.
func (l *ploop) connectBridged(up *lup, cr *admin.Credentials) error {
	dialErr := func(err error) error {
		return &net.OpError{Op: "dial", Net: up.addr.Network(), Addr: up.addr, Err: err}
	}
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return dialErr(os.NewSyscallError("socketpair", err))
	}
	far, err := fdConn(fds[1])
	if err != nil {
		syscall.Close(fds[0])
		return dialErr(err)
	}
	if err := l.pollUp(up, fds[0], dialErr); err != nil {
		far.Close()
		return err
	}
	b := &upBridge{}
	up.bridge = b
	// The loop is one of wg's members while it runs, so this Add never
	// races Close's Wait.
	l.p.wg.Add(1)
	go l.p.runUpBridge(far, up.addr.String(), cr, up.bin, up.u.timeout, b)
	return nil
}

// runUpBridge is the goroutine of one bridged server connection, owned by
// the Proxy: it dials addr, then copies between far (the loop's pair) and
// the server until either side closes. Close ends it: the loops close
// their ends, and bctx ends a dial.
func (p *Proxy) runUpBridge(far net.Conn, addr string, cr *admin.Credentials, bin bool, timeout time.Duration, b *upBridge) {
	defer p.wg.Done()
	nc, err := dialUp(p.bctx, addr, cr, bin, timeout)
	if err != nil {
		var e error = &net.OpError{Op: "dial", Net: "tcp", Addr: stringAddr(addr), Err: err}
		b.err.Store(&e)
		far.Close()
		return
	}
	p.wg.Add(1) // this goroutine holds one count: no race with Wait
	go func() { // the loop's requests to the server
		defer p.wg.Done()
		io.Copy(nc, far)
		nc.Close()
	}()
	io.Copy(far, nc) // the server's answers to the loop
	far.Close()
	nc.Close()
}

// stringAddr is a net.Addr of a "host:port" string.
type stringAddr string

func (a stringAddr) Network() string { return "tcp" }
func (a stringAddr) String() string  { return string(a) }

// dialUp connects to a server as cr says. A binary connection logs in
// over SASL SCRAM (DialNet); a text one, whose protocol a node fixes by
// its first byte, with memcached's text token (-Y): "set" with the user
// and password as its data, answered STORED.
func dialUp(ctx context.Context, addr string, cr *admin.Credentials, bin bool, timeout time.Duration) (net.Conn, error) {
	if bin || cr.User == "" {
		return cr.DialNet(ctx, addr, timeout)
	}
	nc, err := (&admin.Credentials{TLS: cr.TLS}).DialNet(ctx, addr, timeout)
	if err != nil {
		return nil, err
	}
	token := cr.User + " " + cr.Password
	nc.SetDeadline(time.Now().Add(timeout))
	_, err = fmt.Fprintf(nc, "set auth 0 0 %d\r\n%s\r\n", len(token), token)
	var line string
	if err == nil {
		// Byte by byte: nothing after the answer may be read here, and
		// the node sends nothing more before the first request.
		var one [1]byte
		for len(line) < 256 && !strings.HasSuffix(line, "\r\n") {
			if _, err = io.ReadFull(nc, one[:]); err != nil {
				break
			}
			line += string(one[:])
		}
	}
	if err == nil && line != "STORED\r\n" {
		err = fmt.Errorf("%w: %q", admin.ErrAuth, strings.TrimSpace(line))
	}
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("log in to %s as %s with a text token: %w", addr, cr.User, err)
	}
	nc.SetDeadline(time.Time{})
	return nc, nil
}
