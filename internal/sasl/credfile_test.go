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
	type loader func(string) (*Passwords, error)
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
		{
			name:    "rotation",
			content: "user:a\nbob:c\n\nuser:b\n",
			pwdb:    map[string]string{"user": "a", "bob": "c"},
			auth:    map[string]string{"user": "a", "bob": "c"},
		},
		{name: "third-entry", content: "user:a\n\nuser:b\nuser:c\n", errText: `line 4: a third entry for user "user" (the first on line 1, the previous password on line 3)`},
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
					if err != nil || !maps.Equal(got.Current, l.want) {
						t.Errorf("%s: got %v, %v; want %q", l.name, got, err, l.want)
					}
					if tt.name == "rotation" && (len(got.Previous) != 1 || got.Previous["user"] != "b") {
						t.Errorf("%s: previous passwords %q, want user's b", l.name, got.Previous)
					}
					if tt.name != "rotation" && got.Previous != nil {
						t.Errorf("%s: previous passwords %q from a file without any", l.name, got.Previous)
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
	for _, load := range []func(string) (*Passwords, error){LoadPasswordFile, LoadAuthFile} {
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
	a, err := NewAuthenticator(Config{Lookup: creds.Lookup, Previous: creds.PreviousOf})
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
