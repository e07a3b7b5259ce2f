package server

import (
	"errors"
	"testing"
	"time"

	"github.com/vbcache/vbcache/internal/admin"
	"github.com/vbcache/vbcache/internal/protocol"
	"github.com/vbcache/vbcache/internal/sasl"
	"github.com/vbcache/vbcache/internal/stream"
	"github.com/vbcache/vbcache/internal/vbucket"
)

var testAdmin = &admin.Credentials{User: "admin", Password: "an admin's password"}

// controlRequests is every cluster-control request (controlOp), each in a
// form a node answers at once when it is served: the list that
// docs/OPERATIONS.md gives.
func controlRequests(t testing.TB) []struct {
	name              string
	op                protocol.Opcode
	vb                uint16
	extras, key, body []byte
} {
	return []struct {
		name              string
		op                protocol.Opcode
		vb                uint16
		extras, key, body []byte
	}{
		{"SET_VBUCKET", protocol.OpSetVBucket, 2, []byte{byte(vbucket.Active)}, nil, nil},
		{"GET_VBUCKET", protocol.OpGetVBucket, 2, nil, nil, nil},
		{"DEL_VBUCKET", protocol.OpDelVBucket, 3, nil, nil, nil},
		{"SET_CLUSTER_CONFIG", protocol.OpSetClusterConfig, 0, revExtras(1, 5), nil, testConfigJSON(t, 1, 5)},
		{"LEASE", protocol.OpLease, 0, nil, nil, nil},
		{"LEASE_QUERY", protocol.OpLeaseQuery, 0, nil, nil, nil},
		// TAKEOVER and REPLICATE without a source: Invalid arguments
		// once past the check, instead of a move.
		{"TAKEOVER", stream.OpTakeover, 4, nil, nil, nil},
		{"REPLICATE", stream.OpReplicate, 4, nil, nil, nil},
		{"STOP_REPLICATION", stream.OpStopReplication, 4, nil, nil, nil},
		{"CLOSE_STREAM", stream.OpCloseStream, 4, nil, nil, nil},
		{"STREAM_REQ", stream.OpStreamReq, 4, make([]byte, 20), nil, nil},
		{"BUFFER_ACK", stream.OpBufferAck, 0, make([]byte, 4), nil, nil},
		{"SEQNO_ACK", stream.OpSeqnoAck, 4, make([]byte, 8), nil, nil},
		// Last: a served OPEN turns the connection into a producer's.
		{"OPEN", stream.OpOpen, 0, make([]byte, 4), []byte("peer"), nil},
	}
}

// login dials addr and logs in as user (none when cr is nil).
func login(t *testing.T, addr string, cr *admin.Credentials) *binClient {
	t.Helper()
	b := dialBin(t, addr)
	if cr != nil {
		if err := admin.Login(b.nc, cr.User, cr.Password); err != nil {
			t.Fatalf("log in as %s: %v", cr.User, err)
		}
	}
	return b
}

// Every control request is refused with memcached's auth error unless the
// connection logged in as the cluster administrator: refused to a
// connection that did not log in and to a data user's, served to the
// admin's. Data requests need no admin.
func TestControlNeedsAdmin(t *testing.T) {
	for _, withSASL := range []bool{false, true} {
		name := map[bool]string{false: "no -S", true: "-S"}[withSASL]
		t.Run(name, func(t *testing.T) {
			s, addr := startCluster(t, func(c *Config) {
				c.ClusterAuth = testAdmin
				c.SASL, c.SASLPasswords = withSASL, &sasl.Passwords{Current: map[string]string{"reader": "a reader's password"}}
			})
			reader := &admin.Credentials{User: "reader", Password: "a reader's password"}
			adm := login(t, addr, testAdmin)
			adm.setState(1, vbucket.Active)
			key := keyFor(t, 1)
			var refused uint64
			for _, r := range controlRequests(t) {
				// A data user: refused, and its data requests go on.
				if withSASL {
					d := login(t, addr, reader)
					if h, body := d.do(r.op, r.vb, r.extras, r.key, r.body); h.Status != protocol.StatusAuthError {
						t.Errorf("%s from a data user: status %#x %q, want auth error", r.name, uint16(h.Status), body)
					}
					refused++
					d.set(1, key, "v")
				}
				// No login at all: refused (and with -S the
				// connection is closed, as memcached closes it).
				anon := dialBin(t, addr)
				if h, body := anon.do(r.op, r.vb, r.extras, r.key, r.body); h.Status != protocol.StatusAuthError {
					t.Errorf("%s without a login: status %#x %q, want auth error", r.name, uint16(h.Status), body)
				}
				if !withSASL {
					refused++
					anon.set(1, key, "v") // data stays open without -S
				}
				// The admin: served (whatever its answer, not the
				// auth error).
				if h, body := adm.do(r.op, r.vb, r.extras, r.key, r.body); h.Status == protocol.StatusAuthError {
					t.Errorf("%s from the admin: refused: %q", r.name, body)
				} else if r.op == protocol.OpSetVBucket && h.Status != protocol.StatusOK {
					t.Errorf("SET_VBUCKET from the admin: status %#x", uint16(h.Status))
				}
			}
			if got := s.cl.controlRefused.Load(); got != refused {
				t.Errorf("control_refused %d, want %d", got, refused)
			}
		})
	}
}

// A wrong password is refused, and a failed login does not leave an
// earlier admin login standing (memcached: every SASL message forgets the
// last authentication).
func TestAdminLoginFailures(t *testing.T) {
	_, addr := startCluster(t, func(c *Config) { c.ClusterAuth = testAdmin })
	b := dialBin(t, addr)
	err := admin.Login(b.nc, "admin", "not the password")
	if !errors.Is(err, admin.ErrAuth) {
		t.Fatalf("a wrong password: %v, want ErrAuth", err)
	}
	if h, _ := b.do(protocol.OpGetVBucket, 0, nil, nil, nil); h.Status != protocol.StatusAuthError {
		t.Fatalf("GET_VBUCKET after a failed login: %#x", uint16(h.Status))
	}
	b = login(t, addr, testAdmin)
	if h, _ := b.do(protocol.OpGetVBucket, 0, nil, nil, nil); h.Status != protocol.StatusOK {
		t.Fatalf("GET_VBUCKET as admin: %#x", uint16(h.Status))
	}
	if err := admin.Login(b.nc, "admin", "not the password"); !errors.Is(err, admin.ErrAuth) {
		t.Fatalf("a wrong password: %v", err)
	}
	if h, _ := b.do(protocol.OpGetVBucket, 0, nil, nil, nil); h.Status != protocol.StatusAuthError {
		t.Fatalf("GET_VBUCKET after a failed re-login: %#x, want auth error", uint16(h.Status))
	}
	// A user other than the admin never gets the role, even one the
	// node knows (there is none here: Lookup knows only the admin).
	if err := admin.Login(dialBin(t, addr).nc, "reader", "x"); !errors.Is(err, admin.ErrAuth) {
		t.Fatalf("an unknown user: %v", err)
	}
}

// A connection that logged in as the admin and then logs in again as a
// data user is that user: the role goes with the identity that had it.
func TestAdminRoleGoesWithTheLogin(t *testing.T) {
	_, addr := startCluster(t, func(c *Config) {
		c.ClusterAuth = testAdmin
		c.SASL, c.SASLPasswords = true, &sasl.Passwords{Current: map[string]string{"reader": "a reader's password"}}
	})
	b := login(t, addr, testAdmin)
	if h, _ := b.do(protocol.OpGetVBucket, 0, nil, nil, nil); h.Status != protocol.StatusOK {
		t.Fatalf("GET_VBUCKET as admin: %#x", uint16(h.Status))
	}
	if err := admin.Login(b.nc, "reader", "a reader's password"); err != nil {
		t.Fatalf("log in again as reader: %v", err)
	}
	if h, _ := b.do(protocol.OpGetVBucket, 0, nil, nil, nil); h.Status != protocol.StatusAuthError {
		t.Fatalf("GET_VBUCKET after logging in again as a data user: %#x, want auth error", uint16(h.Status))
	}
}

// startStrict runs a node with cfg as it is: unlike startServer, no
// InsecureCluster for a cluster node without ClusterAuth.
func startStrict(t *testing.T, cfg Config) string {
	t.Helper()
	cfg.Port, cfg.PortSet, cfg.Listen, cfg.Version = -1, true, []string{"127.0.0.1"}, "t"
	s, stop, done := serveConfig(t, cfg)
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return s.Addrs()[0].String()
}

// A cluster node with no --cluster-auth refuses every control request
// unless it runs with --insecure-cluster; a plain node ignores
// ClusterAuth and stays memcached (SASL unknown without -S).
func TestClusterNodeWithoutLogin(t *testing.T) {
	strict := dialBin(t, startStrict(t, Config{VBuckets: testVBuckets}))
	for _, r := range controlRequests(t) {
		if h, _ := strict.do(r.op, r.vb, r.extras, r.key, r.body); h.Status != protocol.StatusAuthError {
			t.Errorf("%s on a node without --cluster-auth: %#x, want auth error", r.name, uint16(h.Status))
		}
	}
	if h, _ := strict.do(protocol.OpSASLList, 0, nil, nil, nil); h.Status != protocol.StatusUnknown {
		t.Errorf("SASL_LIST_MECHS with nothing to log in as: %#x, want unknown command", uint16(h.Status))
	}
	open := dialBin(t, startStrict(t, Config{VBuckets: testVBuckets, InsecureCluster: true}))
	if h, _ := open.do(protocol.OpSetVBucket, 1, []byte{byte(vbucket.Active)}, nil, nil); h.Status != protocol.StatusOK {
		t.Errorf("SET_VBUCKET with --insecure-cluster: %#x", uint16(h.Status))
	}
	plain := dialBin(t, startStrict(t, Config{ClusterAuth: testAdmin}))
	if h, _ := plain.do(protocol.OpSASLList, 0, nil, nil, nil); h.Status != protocol.StatusUnknown {
		t.Errorf("SASL_LIST_MECHS on a plain node: %#x, want unknown command", uint16(h.Status))
	}
	if h, _ := plain.do(protocol.OpSetVBucket, 1, []byte{byte(vbucket.Active)}, nil, nil); h.Status != protocol.StatusUnknown {
		t.Errorf("SET_VBUCKET on a plain node: %#x, want unknown command", uint16(h.Status))
	}
}

// A node logs in to its peers with its ClusterAuth: a replica on one node
// streams from another when both have the same admin login, and does not
// when they were given different passwords (the source counts the failed
// logins).
func TestPeersLogIn(t *testing.T) {
	other := &admin.Credentials{User: "admin", Password: "another cluster's"}
	for _, tc := range []struct {
		name    string
		target  *admin.Credentials
		streams bool
	}{{"same login", testAdmin, true}, {"another cluster's login", other, false}} {
		t.Run(tc.name, func(t *testing.T) {
			srcSrv, src := startCluster(t, func(c *Config) { c.ClusterAuth = testAdmin })
			_, dst := startCluster(t, func(c *Config) { c.ClusterAuth = tc.target })
			a, b := login(t, src, testAdmin), login(t, dst, tc.target)
			a.setState(1, vbucket.Active)
			key := keyFor(t, 1)
			a.set(1, key, "streamed")
			b.setState(1, vbucket.Replica)
			if h, body := b.do(stream.OpReplicate, 1, nil, []byte(src), nil); h.Status != protocol.StatusOK {
				t.Fatalf("REPLICATE: %#x %q", uint16(h.Status), body)
			}
			authErrors := func() uint64 {
				var tot totals
				srcSrv.sumCounters(&tot)
				return tot.authErrors
			}
			deadline := time.Now().Add(10 * time.Second)
			for {
				h, body := b.do(protocol.OpGetReplica, 1, nil, []byte(key), nil)
				if h.Status == protocol.StatusOK {
					if !tc.streams {
						t.Fatal("the replica streamed from a node whose login it does not have")
					}
					if string(body[h.ExtLen:]) != "streamed" {
						t.Fatalf("replica value %q", body[h.ExtLen:])
					}
					return
				}
				if !tc.streams && authErrors() >= 2 {
					return // refused twice (a retry too), nothing streamed
				}
				if time.Now().After(deadline) {
					t.Fatalf("neither streamed nor refused in 10 s: %#x, %d auth errors at the source", uint16(h.Status), authErrors())
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
}

// FuzzClusterAuth feeds a cluster node that has --cluster-auth and -S
// arbitrary input on a plain TCP connection, seeded with logins (the
// administrator's PLAIN login with the right password among them, which
// is refused outside TLS) and every control request. Whatever arrives,
// the connection never gets the admin role (SCRAM's proof cannot be
// forged, and PLAIN is refused for the administrator here), no vbucket
// leaves the dead state, and no cluster config is stored.
func FuzzClusterAuth(f *testing.F) {
	req := func(op protocol.Opcode, vb uint16, extras, key, value []byte) []byte {
		return protocol.AppendRequest(nil, &protocol.Request{Header: protocol.Header{Opcode: op, VBucket: vb}, Extras: extras, Key: key, Value: value})
	}
	plainAdmin := req(protocol.OpSASLAuth, 0, nil, []byte("PLAIN"), []byte("\x00admin\x00"+testAdmin.Password))
	plainReader := req(protocol.OpSASLAuth, 0, nil, []byte("PLAIN"), []byte("\x00reader\x00r"))
	scram := req(protocol.OpSASLAuth, 0, nil, []byte("SCRAM-SHA256"), []byte("n,,n=admin,r=abcdefghijklmnop"))
	step := req(protocol.OpSASLStep, 0, nil, []byte("SCRAM-SHA256"), []byte("c=biws,r=abcdefghijklmnop,p=AAAA"))
	f.Add(plainAdmin)
	f.Add(append(append([]byte{}, scram...), step...))
	f.Add(append(req(protocol.OpSASLList, 0, nil, nil, nil), plainReader...))
	var all []byte
	for _, r := range controlRequests(f) {
		one := req(r.op, r.vb, r.extras, r.key, r.body)
		f.Add(append(append([]byte{}, plainAdmin...), one...))
		f.Add(append(append([]byte{}, plainReader...), one...))
		all = append(all, one...)
	}
	f.Add(append(append([]byte{}, plainAdmin...), all...))
	f.Add(append([]byte("set k 0 0 1\r\nx\r\n"), plainAdmin...))
	s, err := New(Config{Port: -1, PortSet: true, Version: "fuzz", VBuckets: 8, ClusterAuth: testAdmin,
		SASL: true, SASLPasswords: &sasl.Passwords{Current: map[string]string{"reader": "r"}},
		VBucketParkTimeout: time.Millisecond, Store: storeCfgForFuzz()})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(s.store.Close)
	f.Fuzz(func(t *testing.T, in []byte) {
		c := newConn(s, nil)
		c.ctr = &s.counters[0]
		c.rbuf = append([]byte(nil), in...)
		c.r, c.w = 0, len(in)
		c.processInput()
		if c.admin {
			t.Fatal("a plain connection got the admin role")
		}
		for vb := range s.cl.vbs.Len() {
			if st := s.cl.vbs.Get(vb); st != vbucket.Dead {
				t.Fatalf("vbucket %d is %v: a refused SET_VBUCKET took effect", vb, st)
			}
		}
		if s.cl.config.Load() != nil {
			t.Fatal("a refused SET_CLUSTER_CONFIG was stored")
		}
	})
}
