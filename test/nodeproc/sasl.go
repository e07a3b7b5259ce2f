package nodeproc

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// SASLEnv prepares credentials for a node started with -S and returns the
// environment to start it with (pass it to StartEnv). The same environment
// serves both kinds:
//
//   - MEMCACHED_SASL_PWDB names a file of "user:password" lines. vbcache
//     reads it; so would a memcached built with ENABLE_SASL_PWDB, but
//     Debian's 1.6.18 is not (its binary has no "MEMCACHED_SASL_PWDB"
//     string) and checks passwords through Cyrus SASL instead.
//   - SASL_CONF_PATH names a directory holding memcached.conf, which
//     memcached's sasl_getconf hands to Cyrus SASL: mechanism PLAIN only,
//     passwords from a sasldb2 file that saslpasswd2 (package sasl2-bin)
//     fills here. memcached asks Cyrus for the user in the realm given by
//     gethostname(), so the user is created in that realm.
//
// With memcached false the sasldb2 file is not made and saslpasswd2 is not
// needed.
func SASLEnv(tb testing.TB, user, pass string, memcached bool) []string {
	tb.Helper()
	dir := tb.TempDir()
	pwdb := filepath.Join(dir, "pwdb")
	if err := os.WriteFile(pwdb, []byte(user+":"+pass+"\n"), 0o600); err != nil {
		tb.Fatal(err)
	}
	env := []string{"MEMCACHED_SASL_PWDB=" + pwdb}
	if !memcached {
		return env
	}
	sasldb := filepath.Join(dir, "sasldb2")
	conf := fmt.Sprintf("mech_list: plain\npwcheck_method: auxprop\nauxprop_plugin: sasldb\nsasldb_path: %s\n", sasldb)
	if err := os.WriteFile(filepath.Join(dir, "memcached.conf"), []byte(conf), 0o600); err != nil {
		tb.Fatal(err)
	}
	tool := Need(tb, "memcached -S checks passwords in a sasldb2 file (package sasl2-bin)", "saslpasswd2")
	host, err := os.Hostname()
	if err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command(tool, "-p", "-c", "-f", sasldb, "-a", "memcached", "-u", host, user)
	cmd.Stdin = strings.NewReader(pass)
	if out, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("saslpasswd2: %v\n%s", err, out)
	}
	return append(env, "SASL_CONF_PATH="+dir)
}
