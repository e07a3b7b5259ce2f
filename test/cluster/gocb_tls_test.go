package cluster

import (
	"context"
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/couchbase/gocb/v2"

	"github.com/vbcache/vbcache/test/nodeproc"
)

// Couchbase's Go SDK against a TLS cluster, as a Couchbase user runs it:
// couchbases:// with a data user's name and password and the cluster's CA,
// bootstrapping from the config the manager pushed to the nodes (kvSSL
// and mgmtSSL services, CCCP). Documents written before a grow 3→4 read
// back after it (the SDK follows the new map), and a wrong password is
// refused.
func TestGocbOverTLS(t *testing.T) {
	file, nodeTLS := initSecurity(t)
	const user, pass = "app", "app-secret"
	pwdb := filepath.Join(t.TempDir(), "data.pwdb")
	if err := os.WriteFile(pwdb, []byte(user+":"+pass+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var nodes []*nodeproc.Node
	for range 4 {
		nodes = append(nodes, nodeproc.StartEnv(t, nodeproc.Vbcache, vbcacheBin,
			[]string{"MEMCACHED_SASL_PWDB=" + pwdb}, append([]string{"-m", "64", "-S"}, nodeTLS...)...))
	}
	m := mgr{t: t, url: startManager(t, append(vb256, "--replicas", "1", "--failover-after", "0",
		"--tls-ca", file("ca.pem"), "--tls-cert", file("node.pem"), "--tls-key", file("node-key.pem"),
		"--api-tls-cert", file("node.pem"), "--api-tls-key", file("node-key.pem"))...).URL()}
	m.waitLeader()
	for _, n := range nodes[:3] {
		m.addNode(n.Addr)
	}
	m.rebalance(60 * time.Second)

	pem, err := os.ReadFile(file("ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		t.Fatal("ca.pem holds no certificate")
	}
	connect := func(password string, wait time.Duration) (*gocb.Cluster, *gocb.Bucket, error) {
		connStr := fmt.Sprintf("couchbases://%s?bootstrap_on=cccp", nodes[0].Addr)
		c, err := gocb.Connect(connStr, gocb.ClusterOptions{
			Authenticator:  gocb.PasswordAuthenticator{Username: user, Password: password},
			SecurityConfig: gocb.SecurityConfig{TLSRootCAs: roots},
			TimeoutsConfig: gocb.TimeoutsConfig{ConnectTimeout: 10 * time.Second, KVTimeout: 10 * time.Second},
		})
		if err != nil {
			return nil, nil, err
		}
		b := c.Bucket("default")
		err = b.WaitUntilReady(wait, &gocb.WaitUntilReadyOptions{ServiceTypes: []gocb.ServiceType{gocb.ServiceTypeKeyValue}})
		if err != nil {
			c.Close(nil)
			return nil, nil, err
		}
		return c, b, nil
	}

	// The SDK reports a refused login only as a timeout: the node's
	// auth_errors show that the password is why.
	before := authErrors(t, nodes[0].Addr)
	if c, _, err := connect("wrong-password", 3*time.Second); err == nil {
		c.Close(nil)
		t.Error("gocb bootstrapped with a wrong password")
	} else if n := authErrors(t, nodes[0].Addr) - before; n == 0 {
		t.Errorf("a wrong password: %v, and %s counts no auth_errors", err, nodes[0].Addr)
	} else {
		t.Logf("a wrong password: %v; %s auth_errors +%d", err, nodes[0].Addr, n)
	}

	c, b, err := connect(pass, 15*time.Second)
	if err != nil {
		t.Fatalf("gocb over couchbases://: %v", err)
	}
	defer c.Close(nil)
	col := b.DefaultCollection()
	const docs = 300
	type doc struct {
		N  int    `json:"n"`
		ID string `json:"id"`
	}
	for i := range docs {
		id := fmt.Sprintf("doc-%d", i)
		if _, err := col.Upsert(id, doc{N: i, ID: id}, nil); err != nil {
			t.Fatalf("Upsert %s: %v", id, err)
		}
	}
	readAll := func(when string) {
		t.Helper()
		for i := range docs {
			id := fmt.Sprintf("doc-%d", i)
			res, err := col.Get(id, nil)
			if err != nil {
				t.Fatalf("%s: Get %s: %v", when, id, err)
			}
			var d doc
			if err := res.Content(&d); err != nil || d.N != i || d.ID != id {
				t.Fatalf("%s: Get %s = %+v (%v)", when, id, d, err)
			}
		}
	}
	readAll("before the grow")

	m.addNode(nodes[3].Addr)
	rb := m.rebalance(60 * time.Second)
	if s := m.status(); !strings.HasPrefix(s.Leader, "https://") || len(s.Nodes) != 4 {
		t.Fatalf("after the grow: %+v", s)
	}
	readAll("after the grow")
	t.Logf("gocb over TLS: %d documents written, read back before and after a grow 3→4 (%d vbuckets moved)", docs, rb.Done)
}

// authErrors is the node's stats auth_errors.
func authErrors(t *testing.T, addr string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := nodeproc.DialAdmin(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	st, err := c.Stats("")
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range st {
		if kv[0] == "auth_errors" {
			n, err := strconv.Atoi(kv[1])
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("%s: no auth_errors in stats", addr)
	return 0
}
