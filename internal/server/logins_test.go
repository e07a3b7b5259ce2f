package server

import (
	"errors"
	"testing"

	"github.com/vbcache/vbcache/internal/admin"
	"github.com/vbcache/vbcache/internal/protocol"
	"github.com/vbcache/vbcache/internal/sasl"
)

// A rotation of every kind of login through SetLogins, as SIGHUP does it:
// while the administrator's file has the new password first and the old
// one second, both log in; once the old line is gone it is refused. A
// connection that logged in before keeps its role throughout (open
// streams survive a rotation). -S's users and -Y's tokens follow their
// files the same way, and a reload cannot switch a kind of login on or
// off.
func TestSetLoginsRotates(t *testing.T) {
	old := &admin.Credentials{User: "admin", Password: "the old password"}
	s, addr := startCluster(t, func(c *Config) {
		c.ClusterAuth = old
		c.SASL, c.SASLPasswords = true, &sasl.Passwords{Current: map[string]string{"app": "app one"}}
	})
	isAdmin := func(b *binClient) bool {
		h, _ := b.do(protocol.OpLeaseQuery, 0, nil, nil, nil)
		return h.Status != protocol.StatusAuthError
	}
	tryLogin := func(user, password string) error {
		return admin.Login(dialBin(t, addr).nc, user, password)
	}
	before := login(t, addr, old)
	if !isAdmin(before) {
		t.Fatal("the administrator has no admin role")
	}

	// Step 2 of the rotation: the new password first, the old second.
	rotating := &admin.Credentials{User: "admin", Password: "the new password", Previous: old.Password}
	if err := s.SetLogins(&sasl.Passwords{Current: map[string]string{"app": "app two"}, Previous: map[string]string{"app": "app one"}}, nil, rotating); err != nil {
		t.Fatal(err)
	}
	for _, pw := range []string{"the new password", "the old password"} {
		if err := tryLogin("admin", pw); err != nil {
			t.Errorf("admin with %q during the rotation: %v", pw, err)
		}
	}
	if got := s.peerCredentials(); got.Password != "the new password" {
		t.Errorf("the node dials its peers with %q, want the new password", got.Password)
	}
	for _, pw := range []string{"app one", "app two"} {
		if err := plainLogin(t, addr, "app", pw); err != nil {
			t.Errorf("data user with %q during the rotation: %v", pw, err)
		}
	}

	// Step 3: the old password is gone.
	if err := s.SetLogins(&sasl.Passwords{Current: map[string]string{"app": "app two"}}, nil, &admin.Credentials{User: "admin", Password: "the new password"}); err != nil {
		t.Fatal(err)
	}
	if err := tryLogin("admin", "the old password"); !errors.Is(err, admin.ErrAuth) {
		t.Errorf("admin with the old password after the rotation: %v, want ErrAuth", err)
	}
	if err := tryLogin("admin", "the new password"); err != nil {
		t.Errorf("admin with the new password: %v", err)
	}
	if err := plainLogin(t, addr, "app", "app one"); err == nil {
		t.Error("the data user's old password still logs in")
	}
	if !isAdmin(before) {
		t.Error("a connection logged in before the rotation lost its admin role")
	}
	if !isAdmin(login(t, addr, &admin.Credentials{User: "admin", Password: "the new password"})) {
		t.Error("the new password gives no admin role")
	}

	if err := s.SetLogins(nil, nil, &admin.Credentials{User: "admin", Password: "x"}); !errors.Is(err, ErrLoginsChanged) {
		t.Errorf("dropping -S's users by a reload: %v, want ErrLoginsChanged", err)
	}
	if err := s.SetLogins(&sasl.Passwords{Current: map[string]string{"app": "x"}}, &sasl.Passwords{Current: map[string]string{"t": "x"}}, &admin.Credentials{User: "admin", Password: "x"}); !errors.Is(err, ErrLoginsChanged) {
		t.Errorf("adding -Y's tokens by a reload: %v, want ErrLoginsChanged", err)
	}
}

// -Y's tokens follow SetLogins: the old token is refused after it, the
// new one logs in.
func TestSetLoginsTokens(t *testing.T) {
	s, addr := startServer(t, func(c *Config) { c.AuthTokens = &sasl.Passwords{Current: map[string]string{"alice": "one"}} })
	const ok, refused = "STORED\r\n", "CLIENT_ERROR authentication failure\r\n"
	if got := roundTrip(t, addr, "set x 0 0 9\r\nalice one\r\n", len(ok)); got != ok {
		t.Fatalf("before: %q", got)
	}
	if err := s.SetLogins(nil, &sasl.Passwords{Current: map[string]string{"alice": "two"}}, nil); err != nil {
		t.Fatal(err)
	}
	if got := roundTrip(t, addr, "set x 0 0 9\r\nalice one\r\n", len(refused)); got != refused {
		t.Errorf("the old token after the reload: %q", got)
	}
	if got := roundTrip(t, addr, "set x 0 0 9\r\nalice two\r\n", len(ok)); got != ok {
		t.Errorf("the new token: %q", got)
	}
}

// plainLogin logs in over SASL PLAIN on a new connection.
func plainLogin(t *testing.T, addr, user, password string) error {
	t.Helper()
	b := dialBin(t, addr)
	h, body := b.do(protocol.OpSASLAuth, 0, nil, []byte("PLAIN"), []byte("\x00"+user+"\x00"+password))
	if h.Status != protocol.StatusOK {
		return errors.New(string(body))
	}
	return nil
}
