package manager

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

// TestUpdateDoesNotHoldMuAcrossEtcd: while update's etcd transaction is
// in flight, the state stays readable (State, Leader: every HTTP request,
// the watch's setState and the election's observer take m.mu). update
// held m.mu across the transaction, so an etcd that was slow or gone
// froze the manager's whole API until it answered; with the
// context.Background() of the rebalance's last commit, for as long as
// etcd stayed away.
func TestUpdateDoesNotHoldMuAcrossEtcd(t *testing.T) {
	client := startTestEtcdServer(t)

	// Txn calls wait in the interceptor while hold is set: entered says
	// one is waiting, release lets it go.
	var hold atomic.Bool
	var enter sync.Once
	entered, release := make(chan struct{}), make(chan struct{})
	block := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if hold.Load() && method == "/etcdserverpb.KV/Txn" {
			enter.Do(func() { close(entered) })
			<-release
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{client}, DialTimeout: 5 * time.Second,
		Logger: zap.NewNop(), DialOptions: []grpc.DialOption{grpc.WithUnaryInterceptor(block)}})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	// The default session TTL (5 s): the test has one manager and never
	// needs its leadership to expire, and with 1 s a loaded machine lost
	// it between the test's checks ("manager: not the leader").
	m, err := New(Config{Etcd: cli, Advertise: "http://127.0.0.1:1", NumVBuckets: 16})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { // owned by the test: ends with ctx
		defer close(ran)
		m.Run(ctx)
	}()
	defer func() { cancel(); <-ran }()
	for deadline := time.Now().Add(20 * time.Second); ; {
		if leading, _ := m.Leader(); leading {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the manager did not lead within 20 s")
		}
		time.Sleep(10 * time.Millisecond) // polling a condition, not waiting for time to pass
	}

	hold.Store(true)
	before := m.State().Rev
	updated := make(chan error, 1)
	go func() {
		_, err := m.update(ctx, func(s *State) error { s.Rev++; return nil })
		updated <- err
	}()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("update's transaction did not start")
	}
	read := make(chan int64, 1)
	go func() {
		m.Leader()
		read <- m.State().Rev
	}()
	waited := false
	select {
	case rev := <-read:
		if rev != before {
			t.Errorf("State during the transaction: rev %d, want %d (not written yet)", rev, before)
		}
	case <-time.After(10 * time.Second):
		t.Error("State and Leader waited for update's etcd transaction")
		waited = true
	}
	close(release)
	if err := <-updated; err != nil {
		t.Fatal(err)
	}
	if got := m.State().Rev; got != before+1 {
		t.Errorf("after update: rev %d, want %d", got, before+1)
	}
	if waited {
		<-read
	}
}

// TestCommitMoveBatches: moves' commits that arrive while one is in
// etcd wait for it and then go together, in one transaction; a change
// that fails is left out of its batch alone, with its error.
func TestCommitMoveBatches(t *testing.T) {
	client := startTestEtcdServer(t)
	var hold atomic.Bool
	var txns atomic.Int32
	var enter sync.Once
	entered, release := make(chan struct{}), make(chan struct{})
	block := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if hold.Load() && method == "/etcdserverpb.KV/Txn" {
			txns.Add(1)
			enter.Do(func() { close(entered); <-release })
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{client}, DialTimeout: 5 * time.Second,
		Logger: zap.NewNop(), DialOptions: []grpc.DialOption{grpc.WithUnaryInterceptor(block)}})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	m, err := New(Config{Etcd: cli, Advertise: "http://127.0.0.1:1", NumVBuckets: 16})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { // owned by the test: ends with ctx
		defer close(ran)
		m.Run(ctx)
	}()
	defer func() { cancel(); <-ran }()
	for deadline := time.Now().Add(20 * time.Second); ; {
		if leading, _ := m.Leader(); leading {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the manager did not lead within 20 s")
		}
		time.Sleep(10 * time.Millisecond) // polling a condition, not waiting for time to pass
	}

	hold.Store(true)
	before := m.State().Rev
	add := func(name string, fail bool) func(s *State) error {
		return func(s *State) error {
			s.Nodes = append(s.Nodes, name) // changed even when it fails: the batch must drop it
			s.Rev++
			if fail {
				return errors.New("refused " + name)
			}
			return nil
		}
	}
	type answer struct {
		name string
		s    *State
		err  error
	}
	answers := make(chan answer, 11)
	go func() {
		s, err := m.commitMove(ctx, add("first", false))
		answers <- answer{"first", s, err}
	}()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the first commit's transaction did not start")
	}
	for i := range 10 {
		name := fmt.Sprintf("n%d", i)
		go func() {
			s, err := m.commitMove(ctx, add(name, i == 3))
			answers <- answer{name, s, err}
		}()
	}
	// All ten queued behind the first (its committer takes the queue
	// only after its transaction).
	for deadline := time.Now().Add(10 * time.Second); ; {
		m.batchMu.Lock()
		n := len(m.batchQ)
		m.batchMu.Unlock()
		if n == 10 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d commits queued, want 10", n)
		}
		time.Sleep(time.Millisecond) // polling a condition
	}
	close(release)
	for range 11 {
		a := <-answers
		switch {
		case a.name == "n3":
			if a.err == nil || !strings.Contains(a.err.Error(), "refused n3") {
				t.Errorf("the failing change: %v, want its own error", a.err)
			}
		case a.err != nil:
			t.Errorf("%s: %v", a.name, a.err)
		case !slices.Contains(a.s.Nodes, a.name):
			t.Errorf("%s's answer does not hold its change: %v", a.name, a.s.Nodes)
		}
	}
	s := m.State()
	if s.Rev != before+10 || len(s.Nodes) != 10 || slices.Contains(s.Nodes, "n3") {
		t.Errorf("after the batch: rev %d (want %d), nodes %v (want first and n0..n9 but n3)", s.Rev, before+10, s.Nodes)
	}
	if n := txns.Load(); n != 2 {
		t.Errorf("%d transactions for 11 commits, want 2 (the first, then one batch)", n)
	}
}
