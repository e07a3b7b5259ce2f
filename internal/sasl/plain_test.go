package sasl

import (
	"bytes"
	"errors"
	"testing"
)

func TestPlain(t *testing.T) {
	a := newTestAuth(t)
	tests := []struct {
		name   string
		msg    string
		user   string // on success
		target error  // nil means success
	}{
		{"ok", "\x00user\x00pencil", "user", nil},
		{"ok/authzid-same", "user\x00user\x00pencil", "user", nil},
		{"ok/colon-password", "\x00colon\x00x:y", "colon", nil},
		{"ok/odd-user", "\x00a,b=c\x00comma=equals", "a,b=c", nil},
		{"wrong-password", "\x00user\x00pencil2", "", ErrAuthFailed},
		{"password-prefix", "\x00user\x00penci", "", ErrAuthFailed},
		{"unknown-user", "\x00nobody\x00pencil", "", ErrAuthFailed},
		{"authzid-other", "admin\x00user\x00pencil", "", ErrAuthFailed},
		{"no-nul", "userpencil", "", ErrMalformed},
		{"one-nul", "user\x00pencil", "", ErrMalformed},
		{"three-nuls", "\x00user\x00pencil\x00", "", ErrMalformed},
		{"empty-user", "\x00\x00pencil", "", ErrMalformed},
		{"empty-password", "\x00user\x00", "", ErrMalformed},
		{"too-long", "\x00user\x00" + string(bytes.Repeat([]byte("p"), MaxMessageLen)), "", ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, mech := range []string{"PLAIN"} {
				s, err := a.NewServer(mech)
				if err != nil {
					t.Fatal(err)
				}
				out, done, err := s.Step([]byte(tt.msg))
				if tt.target == nil {
					if err != nil || !done || len(out) != 0 || s.User() != tt.user {
						t.Fatalf("got (%q, %v, %v) user %q, want success as %q", out, done, err, s.User(), tt.user)
					}
				} else if !errors.Is(err, tt.target) || done || s.User() != "" {
					t.Fatalf("got (%q, %v, %v) user %q, want %v", out, done, err, s.User(), tt.target)
				}
				if _, _, err := s.Step([]byte(tt.msg)); !errors.Is(err, ErrSequence) {
					t.Fatalf("second Step: %v, want ErrSequence", err)
				}
			}
		})
	}
}

// TestPlainEmptyInitialResponse: a client that sends SASL_AUTH with no value
// gets an empty AUTH_CONTINUE and then sends the credentials in SASL_STEP.
func TestPlainEmptyInitialResponse(t *testing.T) {
	a := newTestAuth(t)
	s, _ := a.NewServer("PLAIN")
	out, done, err := s.Step(nil)
	if err != nil || done || out == nil || len(out) != 0 {
		t.Fatalf("empty: (%q, %v, %v)", out, done, err)
	}
	if _, done, err := s.Step([]byte("\x00user\x00pencil")); err != nil || !done {
		t.Fatalf("credentials: %v %v", done, err)
	}
	if s.User() != "user" {
		t.Fatalf("User() = %q", s.User())
	}
}
