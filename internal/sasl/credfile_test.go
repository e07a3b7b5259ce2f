package sasl

import (
	"errors"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeTemp(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "creds")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadCredentialFiles(t *testing.T) {
	type loader func(string) (map[string]string, error)
	pwdb, authfile := loader(LoadPasswordFile), loader(LoadAuthFile)
	tests := []struct {
		name    string
		content string
		pwdb    map[string]string // nil: error wrapping ErrCredentialFile
		auth    map[string]string
		errText string // part of the error, when pwdb or auth is nil
	}{
		{
			name:    "simple",
			content: "user:pencil\nbob:secret\n",
			pwdb:    map[string]string{"user": "pencil", "bob": "secret"},
			auth:    map[string]string{"user": "pencil", "bob": "secret"},
		},
		{
			name:    "mysql-doc-style",
			content: "testname:testpasswd:::::::\n",
			pwdb:    map[string]string{"testname": "testpasswd"},
			auth:    map[string]string{"testname": "testpasswd:::::::"},
		},
		{
			name:    "crlf-blank-lines-no-final-newline",
			content: "\r\nuser:pencil\r\n\n\nbob:secret",
			pwdb:    map[string]string{"user": "pencil", "bob": "secret"},
			auth:    map[string]string{"user": "pencil", "bob": "secret"},
		},
		{
			name:    "spaces-are-data",
			content: " user : pencil \n",
			pwdb:    map[string]string{" user ": " pencil "},
			auth:    map[string]string{" user ": " pencil "},
		},
		{
			name:    "longest-line",
			content: "u:" + strings.Repeat("p", maxLineLen-2) + "\n",
			pwdb:    map[string]string{"u": strings.Repeat("p", maxLineLen-2)},
			auth:    map[string]string{"u": strings.Repeat("p", maxLineLen-2)},
		},
		{name: "too-long", content: "u:" + strings.Repeat("p", maxLineLen-1) + "\n", errText: "line 1: entry is 255 bytes"},
		{name: "no-colon", content: "user:pencil\n# comment\n", errText: "line 2: malformed entry, want user:password"},
		{name: "empty-user", content: ":pencil\n", errText: "line 1: empty user name"},
		{name: "empty-password", content: "user:\n", errText: `line 1: empty password for user "user"`},
		{name: "empty-password-pwdb", content: "user::x\n", auth: map[string]string{"user": ":x"}, errText: "empty password"},
		{name: "duplicate", content: "user:a\n\nuser:b\n", errText: `line 3: duplicate user "user" (first on line 1)`},
		{name: "nul", content: "user:pen\x00cil\n", errText: "line 1: NUL byte"},
		{name: "empty-file", content: "", errText: "has no user:password entries"},
		{name: "only-blank", content: "\n\r\n\n", errText: "has no user:password entries"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := writeTemp(t, tt.content)
			for _, l := range []struct {
				name string
				load loader
				want map[string]string
			}{{"pwdb", pwdb, tt.pwdb}, {"authfile", authfile, tt.auth}} {
				got, err := l.load(p)
				if l.want != nil {
					if err != nil || !maps.Equal(got, l.want) {
						t.Errorf("%s: got %q, %v; want %q", l.name, got, err, l.want)
					}
					continue
				}
				if !errors.Is(err, ErrCredentialFile) || !strings.Contains(err.Error(), tt.errText) || !strings.Contains(err.Error(), p) {
					t.Errorf("%s: err = %v; want ErrCredentialFile naming the path and %q", l.name, err, tt.errText)
				}
				if got != nil {
					t.Errorf("%s: map %v returned with error", l.name, got)
				}
			}
		})
	}
}

func TestLoadCredentialFileErrors(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nope")
	for _, load := range []func(string) (map[string]string, error){LoadPasswordFile, LoadAuthFile} {
		if _, err := load(missing); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("missing file: %v, want fs.ErrNotExist", err)
		}
		if _, err := load(t.TempDir()); err == nil {
			t.Error("directory accepted")
		}
		big := writeTemp(t, strings.Repeat("u:p\n", MaxCredentialFileSize/4+1))
		if _, err := load(big); !errors.Is(err, ErrCredentialFile) || !strings.Contains(err.Error(), "larger than") {
			t.Errorf("big file: %v", err)
		}
	}
}

// TestLoadedFileAuthenticates wires a loaded file into an Authenticator, as
// the server does at start-up.
func TestLoadedFileAuthenticates(t *testing.T) {
	creds, err := LoadAuthFile(writeTemp(t, "user:pen:cil\n"))
	if err != nil {
		t.Fatal(err)
	}
	a, err := NewAuthenticator(Config{Lookup: func(u string) (string, bool) {
		p, ok := creds[u]
		return p, ok
	}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := exchange(a, "SCRAM-SHA256", newClient(hashSHA256, "user", "pen:cil", "n")); err != nil {
		t.Fatal(err)
	}
	s, _ := a.NewServer("PLAIN")
	if _, done, err := s.Step([]byte("\x00user\x00pen:cil")); !done || err != nil {
		t.Fatal(err)
	}
}
