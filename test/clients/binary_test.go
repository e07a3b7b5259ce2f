package clients

// Real binary-protocol clients: pylibmc (binary=True), php-memcached
// (OPT_BINARY_PROTOCOL), memjs (binary only) and libmemcached-tools
// --binary, each without and (except the tools) with SASL PLAIN, against
// memcached and vbcache.

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/vbcache/vbcache/test/nodeproc"
)

const (
	saslUser = "testuser"
	saslPass = "testpass"
)

// eachServerSASL is eachServer for nodes started with -S -B binary and one
// user saslUser:saslPass (memcached: through Cyrus SASL's sasldb, see
// nodeproc.SASLEnv).
func eachServerSASL(t *testing.T, f func(t *testing.T, n *nodeproc.Node)) {
	flags := []string{"-S", "-B", "binary"}
	t.Run("memcached", func(t *testing.T) {
		if _, err := exec.LookPath("memcached"); err != nil {
			nodeproc.Absent(t, "memcached not found in PATH (package memcached)")
		}
		env := nodeproc.SASLEnv(t, saslUser, saslPass, true)
		f(t, nodeproc.StartEnv(t, nodeproc.Memcached, "", env, flags...))
	})
	t.Run("vbcache", func(t *testing.T) {
		if buildErr != nil {
			t.Fatalf("cannot build vbcache: %v", buildErr)
		}
		env := nodeproc.SASLEnv(t, saslUser, saslPass, false)
		f(t, nodeproc.StartEnv(t, nodeproc.Vbcache, vbcacheBin, env, flags...))
	})
}

// runArgs runs a client program with a time limit and fails the test with
// its output if it exits non-zero.
func runArgs(t *testing.T, name string, argv ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s failed: %v\n%s", name, err, out)
	}
	t.Logf("%s", out)
}

func TestPylibmcBinary(t *testing.T) {
	py := needPython(t, "pylibmc", "python3-pylibmc")
	script := filepath.Join("scripts", "pylibmc_binary_check.py")
	t.Run("plain", func(t *testing.T) {
		eachServer(t, func(t *testing.T, n *nodeproc.Node) {
			runArgs(t, "pylibmc binary", py, script, n.Addr)
		})
	})
	t.Run("sasl", func(t *testing.T) {
		// libmemcached authenticates through the Cyrus SASL client, whose
		// PLAIN plugin is in libsasl2-modules.
		eachServerSASL(t, func(t *testing.T, n *nodeproc.Node) {
			runArgs(t, "pylibmc binary SASL", py, script, n.Addr, saslUser, saslPass, "wrongpass")
		})
	})
}

func needPHP(t *testing.T) string {
	php := nodeproc.Need(t, "php-memcached checks (package php-cli)", "php")
	if exec.Command(php, "-r", "exit(class_exists('Memcached') ? 0 : 1);").Run() != nil {
		nodeproc.Absent(t, "php extension memcached not loaded (package php-memcached)")
	}
	return php
}

func TestPHPMemcachedBinary(t *testing.T) {
	php := needPHP(t)
	script := filepath.Join("scripts", "php_memcached_check.php")
	t.Run("plain", func(t *testing.T) {
		eachServer(t, func(t *testing.T, n *nodeproc.Node) {
			runArgs(t, "php-memcached binary", php, script, n.Addr)
		})
	})
	t.Run("sasl", func(t *testing.T) {
		eachServerSASL(t, func(t *testing.T, n *nodeproc.Node) {
			runArgs(t, "php-memcached binary SASL", php, script, n.Addr, saslUser, saslPass)
		})
	})
}

// needMemjs returns the directory holding memjs's check.js with memjs
// installed in its node_modules (test/run.sh runs npm ci there; if it has
// not, this does, from package-lock.json).
func needMemjs(t *testing.T) (node, dir string) {
	node = nodeproc.Need(t, "memjs checks (package nodejs)", "node")
	dir, err := filepath.Abs("memjs")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "memjs")); err == nil {
		return node, dir
	}
	npm := nodeproc.Need(t, "installing memjs (package npm)", "npm")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		nodeproc.Absent(t, "npm ci in test/clients/memjs failed: "+err.Error()+"\n"+string(out))
	}
	return node, dir
}

func TestMemjs(t *testing.T) {
	node, dir := needMemjs(t)
	script := filepath.Join(dir, "check.js")
	t.Run("plain", func(t *testing.T) {
		eachServer(t, func(t *testing.T, n *nodeproc.Node) {
			runArgs(t, "memjs", node, script, n.Addr)
		})
	})
	t.Run("sasl", func(t *testing.T) {
		eachServerSASL(t, func(t *testing.T, n *nodeproc.Node) {
			runArgs(t, "memjs SASL", node, script, n.Addr, saslUser, saslPass)
		})
	})
}

func TestLibmemcachedToolsBinary(t *testing.T) {
	for _, tool := range []string{"cp", "cat", "rm", "flush", "stat"} {
		nodeproc.Need(t, "package libmemcached-tools", "memc"+tool, "mem"+tool)
	}
	bash := nodeproc.Need(t, "bash", "bash")
	eachServer(t, func(t *testing.T, n *nodeproc.Node) {
		runArgs(t, "libmemcached-tools --binary", bash, filepath.Join("scripts", "memctools_binary_check.sh"), n.Addr)
	})
}
