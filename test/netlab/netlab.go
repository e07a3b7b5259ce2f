// Package netlab gives a test its own network: test hosts that are Linux
// network namespaces, joined by a bridge that itself lives in a namespace,
// with addresses that exist only there, and faults between them (issue 21's
// fault harness).
//
// # The network
//
// A Lab is one "switch" namespace holding a bridge, and one namespace per
// Host, each joined to the bridge by a veth pair: the host's end is its
// eth0, with an address in 10.241.N.0/24, where N is chosen so that the
// machine's own namespace has no address or route in that network. No
// namespace of the lab has an interface in the machine's namespace or a
// route out, so test traffic cannot leave the lab, let alone the machine.
//
// A process runs on a host through `ip netns exec` (Host.Command). The test
// process itself stays where it is; it reaches the lab through Host.Dial
// (and DialContext, for HTTP and memcache clients), which opens the socket
// from a thread that has entered the host's namespace, so the connection
// belongs to that host.
//
// # Faults
//
// Cut drops every packet from one host to another, at the receiver's
// input (nftables, in the receiver's namespace): asymmetric on purpose, and
// Partition cuts both ways. Heal removes a host's rules. Pauses and kills
// are signals to the processes, which the caller owns.
//
// Making namespaces needs root and iproute2, and the faults nftables' nft:
// without them New skips the test with the reason, except in CI (CI=true),
// where it fails. Close (registered with t.Cleanup) deletes every namespace
// it made, which also ends every connection inside them.
package netlab

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vbcache/vbcache/test/nodeproc"
)

// Lab is one test's network.
type Lab struct {
	t      testing.TB
	prefix string // namespace names start with it
	net    int    // the third byte of 10.241.N.0/24
	sw     string // the switch namespace

	mu    sync.Mutex // protects hosts
	hosts []*Host
}

// Host is one test host: a namespace with one address.
type Host struct {
	Name string // as the test calls it
	NS   string // the namespace
	IP   string // its address on the lab's bridge
	lab  *Lab
}

var labs atomic.Int32 // labs made by this process, for unique names

// New makes an empty lab, or skips the test when the machine cannot.
func New(t testing.TB) *Lab {
	t.Helper()
	if os.Geteuid() != 0 {
		nodeproc.Absent(t, "network namespaces need root")
	}
	nodeproc.Need(t, "network namespaces (iproute2)", "ip")
	nodeproc.Need(t, "partitions (nftables)", "nft")
	n := pickNet(t)
	l := &Lab{t: t, prefix: fmt.Sprintf("vbl%d-%d", os.Getpid(), labs.Add(1)), net: n}
	l.sw = l.prefix + "-sw"
	t.Cleanup(l.Close)
	l.ip("netns", "add", l.sw)
	l.ip("-n", l.sw, "link", "set", "lo", "up")
	l.ip("-n", l.sw, "link", "add", "br0", "type", "bridge")
	l.ip("-n", l.sw, "link", "set", "br0", "up")
	return l
}

// pickNet returns N such that 10.241.N.0/24 is neither an address nor a
// route of the machine's namespace.
func pickNet(t testing.TB) int {
	t.Helper()
	addrs, err := exec.Command("ip", "-4", "-o", "addr").Output()
	if err != nil {
		t.Fatalf("ip addr: %v", err)
	}
	routes, err := exec.Command("ip", "-4", "route", "show", "table", "all").Output()
	if err != nil {
		t.Fatalf("ip route: %v", err)
	}
	used := string(addrs) + string(routes)
	for n := 1 + os.Getpid()%200; n < 255; n++ {
		if !strings.Contains(used, fmt.Sprintf("10.241.%d.", n)) && !strings.Contains(used, "10.241.0.0/16") && !strings.Contains(used, "10.0.0.0/8") {
			return n
		}
	}
	t.Fatal("no free 10.241.N.0/24 for the lab")
	return 0
}

func (l *Lab) ip(args ...string) {
	l.t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		l.t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// Host adds a test host.
func (l *Lab) Host(name string) *Host {
	l.t.Helper()
	l.mu.Lock()
	i := len(l.hosts) + 1
	h := &Host{Name: name, NS: fmt.Sprintf("%s-h%d", l.prefix, i), IP: fmt.Sprintf("10.241.%d.%d", l.net, i), lab: l}
	l.hosts = append(l.hosts, h)
	l.mu.Unlock()
	veth := fmt.Sprintf("v%d", i)
	l.ip("netns", "add", h.NS)
	l.ip("-n", h.NS, "link", "set", "lo", "up")
	l.ip("-n", l.sw, "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", h.NS)
	l.ip("-n", l.sw, "link", "set", veth, "master", "br0", "up")
	l.ip("-n", h.NS, "addr", "add", h.IP+"/24", "dev", "eth0")
	l.ip("-n", h.NS, "link", "set", "eth0", "up")
	// The filter table the faults add rules to; empty until then.
	h.nft("add table inet lab")
	h.nft("add chain inet lab in { type filter hook input priority 0 ; policy accept ; }")
	return h
}

// Close deletes the lab's namespaces (and so every interface, rule and
// connection in them). Processes still running in them are the caller's.
func (l *Lab) Close() {
	l.mu.Lock()
	hosts := l.hosts
	l.hosts = nil
	l.mu.Unlock()
	for _, h := range hosts {
		exec.Command("ip", "netns", "del", h.NS).Run()
	}
	exec.Command("ip", "netns", "del", l.sw).Run()
}

// Addr is host:port on h.
func (h *Host) Addr(port int) string { return net.JoinHostPort(h.IP, fmt.Sprint(port)) }

// Command returns a command that runs name on h.
func (h *Host) Command(name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", h.NS, name}, args...)...)
}

func (h *Host) nft(rule string) {
	h.lab.t.Helper()
	if out, err := exec.Command("ip", "netns", "exec", h.NS, "nft", rule).CombinedOutput(); err != nil {
		h.lab.t.Fatalf("nft %s on %s: %v: %s", rule, h.Name, err, out)
	}
}

// Cut drops every packet from 'from' to 'to' (at to's input), until Heal.
func (l *Lab) Cut(from, to *Host) {
	l.t.Helper()
	to.nft(fmt.Sprintf("add rule inet lab in ip saddr %s drop", from.IP))
}

// Partition cuts a and b off from each other both ways.
func (l *Lab) Partition(a, b *Host) {
	l.t.Helper()
	l.Cut(a, b)
	l.Cut(b, a)
}

// Heal removes every fault at h's input.
func (l *Lab) Heal(h *Host) {
	l.t.Helper()
	h.nft("flush chain inet lab in")
}

// DialContext opens a connection from h, as if the test ran there.
func (h *Host) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	type result struct {
		c   net.Conn
		err error
	}
	res := make(chan result, 1)
	go func() { // exits locked to its thread, which then ends with it
		runtime.LockOSThread()
		fd, err := unix.Open("/run/netns/"+h.NS, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			res <- result{nil, fmt.Errorf("netlab: open namespace %s: %w", h.NS, err)}
			return
		}
		defer unix.Close(fd)
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			res <- result{nil, fmt.Errorf("netlab: enter namespace %s: %w", h.NS, err)}
			return
		}
		var d net.Dialer
		c, err := d.DialContext(ctx, network, addr)
		res <- result{c, err}
	}()
	r := <-res
	return r.c, r.err
}

// Dial is DialContext with a timeout.
func (h *Host) Dial(network, addr string, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return h.DialContext(ctx, network, addr)
}

// Proc is a process running on a lab host.
type Proc struct {
	Host *Host
	cmd  *exec.Cmd
	out  nodeproc.Output
	done chan struct{}
	err  error // once done
}

// Start runs name on h; a t.Cleanup stops it (SIGCONT, SIGTERM, then
// SIGKILL after 3 s).
func (h *Host) Start(t testing.TB, name string, args ...string) *Proc {
	t.Helper()
	p := &Proc{Host: h, cmd: h.Command(name, args...), done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.out
	// No Pdeathsig: it is tied to the thread that started the child, and
	// DialContext ends threads (it leaves them in another namespace), so
	// a child would be killed whenever its thread ends. t.Cleanup stops
	// it instead.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s on %s: %v", name, h.Name, err)
	}
	go func() { // owned by p: done says it ended
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(p.Stop)
	return p
}

// Pid is the process's id (`ip netns exec` runs the command in its own
// process, so signals reach it).
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Signal sends sig to the process.
func (p *Proc) Signal(sig os.Signal) error { return p.cmd.Process.Signal(sig) }

// Done is closed once the process has ended.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Output is what it wrote so far (stdout and stderr).
func (p *Proc) Output() string { return p.out.String() }

// Stop ends the process and waits for it.
func (p *Proc) Stop() {
	select {
	case <-p.done:
		return
	default:
	}
	p.cmd.Process.Signal(syscall.SIGCONT)
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(3 * time.Second):
		p.cmd.Process.Kill()
		<-p.done
	}
}

// WaitListening waits until addr accepts a connection from the host from,
// for at most d; it fails the test if the process exits first.
func (p *Proc) WaitListening(t testing.TB, from *Host, addr string, d time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(d); ; time.Sleep(20 * time.Millisecond) {
		if c, err := from.Dial("tcp", addr, 200*time.Millisecond); err == nil {
			c.Close()
			return
		}
		select {
		case <-p.done:
			t.Fatalf("%s on %s exited (%v) before it listened on %s:\n%s", p.cmd.Args, p.Host.Name, p.err, addr, p.Output())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s on %s: %s not listening after %v:\n%s", p.cmd.Args, p.Host.Name, addr, d, p.Output())
		}
	}
}
