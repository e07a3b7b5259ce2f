package sasl

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"os"
)

// ErrCredentialFile is wrapped by every error about the contents of a
// credential file. Errors opening or reading the file wrap the *os.PathError
// instead, so errors.Is(err, fs.ErrNotExist) works.
var ErrCredentialFile = errors.New("sasl: invalid credential file")

// MaxCredentialFileSize is the largest credential file the loaders read.
// memcached has no such limit; ours makes a wrong path (a log, a binary)
// fail fast instead of being parsed.
const MaxCredentialFileSize = 1 << 20

// maxLineLen is the longest entry, without its '\n', that memcached reads
// whole: both of its readers use fgets into a 256-byte buffer (MAX_ENTRY_LEN),
// which leaves 254 bytes before the newline. memcached splits longer lines
// into several entries; we refuse them.
const maxLineLen = 254

// LoadPasswordFile reads the file that memcached's MEMCACHED_SASL_PWDB
// environment variable names, as memcached's sasl_defs.c uses it when built
// with --enable-sasl-pwdb:
//
//	user:password[:anything]\n
//
// The password ends at the second colon or the end of the line. memcached's
// check accepts a password if the file has it followed by ':', '\n', '\r' or
// the end of the buffer, which is why the MySQL memcached documentation
// writes entries as "testname:testpasswd:::::::". (memcached would also
// accept "a:b" against the entry "u:a:b"; we read that entry's password as
// "a".) A trailing "\r" is stripped, and blank lines are skipped.
//
// Stricter than memcached, which skips lines it cannot match and stops at the
// first entry for a user: a line without ':', an empty user name or password,
// a NUL byte, a line longer than 254 bytes, a third entry for the same user,
// and a file without entries are all errors wrapping ErrCredentialFile that
// name the path and the line. memcached under Cyrus SASL usually sees user
// names with the realm appended ("user@host"); vbcache uses the name exactly
// as the client sends it.
//
// A user may have two lines: the first holds its password, the second its
// previous one, which still logs in (see Passwords) while a rotation is
// under way.
func LoadPasswordFile(path string) (*Passwords, error) {
	return loadCredentials(path, "MEMCACHED_SASL_PWDB file", true)
}

// LoadAuthFile reads a file in the format of memcached's -Y option
// (authfile.c):
//
//	user:password\n
//
// The password is everything after the first colon, so it may itself contain
// colons. A trailing "\r" is stripped and blank lines are skipped (memcached
// calls a blank line malformed).
//
// memcached keeps at most 8 entries and silently drops the rest ("Not
// supposed to be a huge database!", MAX_ENTRIES in authfile.c); we keep them
// all, up to MaxCredentialFileSize. Errors, all wrapping ErrCredentialFile
// and naming the path and line: a line without ':' (memcached: "has a
// malformed entry. Should be 'user:password'"), an empty user name or
// password, a NUL byte, a line longer than 254 bytes, a third entry for a
// user, and a file without entries. A user on two lines has the first as
// its password and the second as its previous one (memcached accepts
// either of a user's passwords too).
func LoadAuthFile(path string) (*Passwords, error) {
	return loadCredentials(path, "authfile", false)
}

// Passwords are the entries of a credential file: each user's password and,
// for a user on two lines, the previous one. A password rotation without a
// restart is three reloads of every process's files: add the new password
// as a user's first line (the old one moves to the second: both log in),
// switch whatever logs in to the new one, then drop the second line.
type Passwords struct {
	Current  map[string]string // user → password
	Previous map[string]string // user → the password before; nil when none
}

// Lookup returns user's password, as Config.Lookup. It is safe for
// concurrent use as long as p is not written, and a nil p knows no one.
func (p *Passwords) Lookup(user string) (string, bool) {
	if p == nil {
		return "", false
	}
	pw, ok := p.Current[user]
	return pw, ok
}

// PreviousOf returns user's previous password, as Config.Previous.
func (p *Passwords) PreviousOf(user string) (string, bool) {
	if p == nil {
		return "", false
	}
	pw, ok := p.Previous[user]
	return pw, ok
}

// Check reports whether pw is user's password or previous password,
// comparing digests so that neither password's length nor content shows in
// the time it takes.
func (p *Passwords) Check(user, pw string) bool {
	cur, known := p.Lookup(user)
	got := sha256.Sum256([]byte(pw))
	want := sha256.Sum256([]byte(cur))
	match := subtle.ConstantTimeCompare(got[:], want[:]) == 1
	if old, ok := p.PreviousOf(user); ok {
		want = sha256.Sum256([]byte(old))
		match = subtle.ConstantTimeCompare(got[:], want[:]) == 1 || match
	}
	return known && match
}

// Len is the number of users.
func (p *Passwords) Len() int {
	if p == nil {
		return 0
	}
	return len(p.Current)
}

func loadCredentials(path, what string, stopAtColon bool) (*Passwords, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("sasl: open %s: %w", what, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxCredentialFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("sasl: read %s: %w", what, err)
	}
	if len(data) > MaxCredentialFileSize {
		return nil, fmt.Errorf("%w: %s %s is larger than %d bytes", ErrCredentialFile, what, path, MaxCredentialFileSize)
	}
	return parseCredentials(data, path, what, stopAtColon)
}

// parseCredentials parses "user:password" lines; see LoadPasswordFile and
// LoadAuthFile for the rules. path and what only label errors.
func parseCredentials(data []byte, path, what string, stopAtColon bool) (*Passwords, error) {
	creds := &Passwords{Current: make(map[string]string)}
	firstLine, secondLine := make(map[string]int), make(map[string]int)
	bad := func(n int, format string, args ...any) error {
		return fmt.Errorf("%w: %s %s line %d: %s", ErrCredentialFile, what, path, n, fmt.Sprintf(format, args...))
	}
	for n := 1; len(data) > 0; n++ {
		var line []byte
		line, data, _ = bytes.Cut(data, []byte{'\n'})
		line = bytes.TrimSuffix(line, []byte{'\r'})
		if len(line) == 0 {
			continue
		}
		if len(line) > maxLineLen {
			return nil, bad(n, "entry is %d bytes, longer than memcached's limit of %d", len(line), maxLineLen)
		}
		if bytes.IndexByte(line, 0) >= 0 {
			return nil, bad(n, "NUL byte in entry")
		}
		user, pass, ok := bytes.Cut(line, []byte{':'})
		if !ok {
			return nil, bad(n, "malformed entry, want user:password")
		}
		if stopAtColon {
			pass, _, _ = bytes.Cut(pass, []byte{':'})
		}
		if len(user) == 0 {
			return nil, bad(n, "empty user name")
		}
		if len(pass) == 0 {
			return nil, bad(n, "empty password for user %q", user)
		}
		if second, dup := secondLine[string(user)]; dup {
			return nil, bad(n, "a third entry for user %q (the first on line %d, the previous password on line %d)", user, firstLine[string(user)], second)
		}
		if _, dup := firstLine[string(user)]; dup {
			secondLine[string(user)] = n
			if creds.Previous == nil {
				creds.Previous = make(map[string]string)
			}
			creds.Previous[string(user)] = string(pass)
			continue
		}
		firstLine[string(user)] = n
		creds.Current[string(user)] = string(pass)
	}
	if len(creds.Current) == 0 {
		return nil, fmt.Errorf("%w: %s %s has no user:password entries", ErrCredentialFile, what, path)
	}
	return creds, nil
}
