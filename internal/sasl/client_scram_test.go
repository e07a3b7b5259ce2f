package sasl

import (
	"strings"
	"testing"
)

// RFC 7677 section 3's example exchange, byte for byte.
func TestClientRFC7677(t *testing.T) {
	c, err := NewClient("SCRAM-SHA-256", "user", "pencil")
	if err != nil {
		t.Fatal(err)
	}
	c.nonce = "rOprNGfwEbeRWgbNEkqO"
	if got := string(c.First()); got != "n,,n=user,r=rOprNGfwEbeRWgbNEkqO" {
		t.Fatalf("client-first %q", got)
	}
	final, err := c.Final([]byte("r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="; string(final) != want {
		t.Fatalf("client-final\n got %q\nwant %q", final, want)
	}
	if err := c.Verify([]byte("v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")); err != nil {
		t.Fatal(err)
	}
	if err := c.Verify([]byte("v=7rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")); err == nil {
		t.Fatal("a wrong server signature was accepted")
	}
}

// The client against this package's server, for every SCRAM mechanism; a
// wrong password is refused by the server, and a server that answers with
// another password's keys fails Verify.
func TestClientAgainstServer(t *testing.T) {
	a, err := NewAuthenticator(Config{Lookup: func(u string) (string, bool) { return "s3cret", u == "admin" }})
	if err != nil {
		t.Fatal(err)
	}
	for _, mech := range strings.Fields(Mechanisms()) {
		if mech == "PLAIN" {
			if _, err := NewClient(mech, "admin", "s3cret"); err == nil {
				t.Fatal("NewClient accepted PLAIN")
			}
			continue
		}
		for _, pw := range []string{"s3cret", "wrong"} {
			c, err := NewClient(mech, "admin", pw)
			if err != nil {
				t.Fatal(err)
			}
			s, _ := a.NewServer(mech)
			out, done, err := s.Step(c.First())
			if err != nil || done {
				t.Fatalf("%s: server-first: done %v, %v", mech, done, err)
			}
			final, err := c.Final(out)
			if err != nil {
				t.Fatalf("%s: %v", mech, err)
			}
			out, done, err = s.Step(final)
			if pw == "wrong" {
				if err == nil {
					t.Fatalf("%s: a wrong password was accepted", mech)
				}
				continue
			}
			if err != nil || !done {
				t.Fatalf("%s: done %v, %v", mech, done, err)
			}
			if err := c.Verify(out); err != nil {
				t.Fatalf("%s: %v", mech, err)
			}
			if s.User() != "admin" {
				t.Fatalf("%s: server's user %q", mech, s.User())
			}
		}
	}
	// An impostor server: it knows another password, so its signature
	// over the exchange cannot match.
	imp, _ := NewAuthenticator(Config{Lookup: func(string) (string, bool) { return "other", true }})
	c, _ := NewClient(ClientMechanism, "admin", "s3cret")
	s, _ := imp.NewServer(ClientMechanism)
	out, _, _ := s.Step(c.First())
	if _, err := c.Final(out); err != nil {
		t.Fatal(err)
	}
	if err := c.Verify([]byte("v=" + strings.Repeat("A", 43) + "=")); err == nil {
		t.Fatal("a forged signature was accepted")
	}
	for _, bad := range []string{"", "r=x", "r=zz,s=AAAA,i=1", c.nonce[:4] + ",s=,i=1"} {
		c2, _ := NewClient(ClientMechanism, "admin", "s3cret")
		c2.First()
		if _, err := c2.Final([]byte(bad)); err == nil {
			t.Fatalf("server-first %q accepted", bad)
		}
	}
}
