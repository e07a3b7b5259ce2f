// Package clients runs real memcached client libraries against a vbcache
// node, and the same checks against a real memcached to prove the checks
// themselves right. The Python, Perl and shell checks live in scripts/ and
// run as subprocesses (each exits non-zero on any wrong result);
// gomemcache runs in-process.
//
// A missing tool skips its test with a message naming the Debian package;
// with CI=true it fails instead (.ci/run installs everything).
package clients

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"

	"github.com/vbcache/vbcache/test/nodeproc"
)

var (
	vbcacheBin string
	buildErr   error
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "vbcache-clients-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	vbcacheBin, buildErr = nodeproc.BuildVbcache(dir)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// eachServer runs f against a fresh memcached and a fresh vbcache node.
func eachServer(t *testing.T, f func(t *testing.T, n *nodeproc.Node)) {
	t.Run("memcached", func(t *testing.T) {
		if _, err := exec.LookPath("memcached"); err != nil {
			nodeproc.Absent(t, "memcached not found in PATH (package memcached)")
		}
		f(t, nodeproc.Start(t, nodeproc.Memcached, ""))
	})
	t.Run("vbcache", func(t *testing.T) {
		if buildErr != nil {
			t.Fatalf("cannot build vbcache: %v", buildErr)
		}
		f(t, nodeproc.Start(t, nodeproc.Vbcache, vbcacheBin))
	})
}

// runScript runs interp script addr with a time limit and fails the test
// with the script's output if it exits non-zero.
func runScript(t *testing.T, n *nodeproc.Node, interp []string, script string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	args := append(append([]string{}, interp[1:]...), filepath.Join("scripts", script), n.Addr)
	cmd := exec.CommandContext(ctx, interp[0], args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s against %s (%s) failed: %v\n%s", script, n.Kind, n.Addr, err, out)
	}
	t.Logf("%s", strings.TrimSpace(string(out)))
}

// needPython returns Debian's python3 if it can import module. The python3
// first on PATH may be another installation without Debian's modules.
func needPython(t *testing.T, module, pkg string) string {
	t.Helper()
	for _, py := range []string{"/usr/bin/python3", "python3"} {
		p, err := exec.LookPath(py)
		if err != nil {
			continue
		}
		if exec.Command(p, "-c", "import "+module).Run() == nil {
			return p
		}
	}
	nodeproc.Absent(t, fmt.Sprintf("python3 module %s not importable (package %s)", module, pkg))
	return ""
}

func TestPymemcache(t *testing.T) {
	py := needPython(t, "pymemcache", "python3-pymemcache")
	eachServer(t, func(t *testing.T, n *nodeproc.Node) {
		runScript(t, n, []string{py}, "pymemcache_check.py")
	})
}

func TestPylibmc(t *testing.T) {
	py := needPython(t, "pylibmc", "python3-pylibmc")
	eachServer(t, func(t *testing.T, n *nodeproc.Node) {
		runScript(t, n, []string{py}, "pylibmc_check.py")
	})
}

func TestCacheMemcachedPerl(t *testing.T) {
	perl := nodeproc.Need(t, "perl", "perl")
	if exec.Command(perl, "-MCache::Memcached", "-e", "1").Run() != nil {
		nodeproc.Absent(t, "perl module Cache::Memcached not installed (package libcache-memcached-perl)")
	}
	eachServer(t, func(t *testing.T, n *nodeproc.Node) {
		runScript(t, n, []string{perl}, "cache_memcached_check.pl")
	})
}

func TestLibmemcachedTools(t *testing.T) {
	for _, tool := range []string{"cp", "cat", "rm", "flush", "stat"} {
		nodeproc.Need(t, "package libmemcached-tools", "memc"+tool, "mem"+tool)
	}
	bash := nodeproc.Need(t, "bash", "bash")
	eachServer(t, func(t *testing.T, n *nodeproc.Node) {
		runScript(t, n, []string{bash}, "memctools_check.sh")
	})
}

// TestGomemcache drives a node with github.com/bradfitz/gomemcache, the
// client Go users use.
func TestGomemcache(t *testing.T) {
	eachServer(t, func(t *testing.T, n *nodeproc.Node) {
		c := memcache.New(n.Addr)
		c.Timeout = 5 * time.Second
		t.Cleanup(func() { c.Close() })

		must := func(what string, err error) {
			t.Helper()
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
		}
		wantErr := func(what string, err, want error) {
			t.Helper()
			if !errors.Is(err, want) {
				t.Fatalf("%s: err = %v, want %v", what, err, want)
			}
		}
		get := func(key string) *memcache.Item {
			t.Helper()
			it, err := c.Get(key)
			must("get "+key, err)
			return it
		}

		must("ping", c.Ping())
		must("set", c.Set(&memcache.Item{Key: "go:a", Value: []byte("alpha"), Flags: 42}))
		if it := get("go:a"); string(it.Value) != "alpha" || it.Flags != 42 {
			t.Fatalf("get go:a = %q flags %d", it.Value, it.Flags)
		}
		_, err := c.Get("go:missing")
		wantErr("get missing", err, memcache.ErrCacheMiss)

		wantErr("add existing", c.Add(&memcache.Item{Key: "go:a", Value: []byte("x")}), memcache.ErrNotStored)
		must("add new", c.Add(&memcache.Item{Key: "go:b", Value: []byte("beta")}))
		wantErr("replace missing", c.Replace(&memcache.Item{Key: "go:zz", Value: []byte("x")}), memcache.ErrNotStored)
		must("replace", c.Replace(&memcache.Item{Key: "go:b", Value: []byte("BETA")}))
		must("append", c.Append(&memcache.Item{Key: "go:b", Value: []byte("-end")}))
		must("prepend", c.Prepend(&memcache.Item{Key: "go:b", Value: []byte("start-")}))
		if it := get("go:b"); string(it.Value) != "start-BETA-end" {
			t.Fatalf("after append/prepend: %q", it.Value)
		}
		wantErr("append missing", c.Append(&memcache.Item{Key: "go:nokey", Value: []byte("x")}), memcache.ErrNotStored)

		bin := make([]byte, 0, 300000)
		for i := 0; len(bin) < cap(bin); i++ {
			bin = append(bin, byte(i*7), '\r', '\n', 0)
		}
		must("set binary", c.Set(&memcache.Item{Key: "go:bin", Value: bin}))
		if it := get("go:bin"); string(it.Value) != string(bin) {
			t.Fatalf("binary value differs (len %d vs %d)", len(it.Value), len(bin))
		}
		must("set empty", c.Set(&memcache.Item{Key: "go:empty", Value: []byte{}}))
		if it := get("go:empty"); len(it.Value) != 0 {
			t.Fatalf("empty value: %q", it.Value)
		}

		keys := []string{"go:nope"}
		for i := 0; i < 200; i++ {
			k := fmt.Sprintf("go:m%d", i)
			keys = append(keys, k)
			must("set "+k, c.Set(&memcache.Item{Key: k, Value: []byte("value-" + k), Flags: uint32(i)}))
		}
		m, err := c.GetMulti(keys)
		must("get multi", err)
		if len(m) != 200 {
			t.Fatalf("GetMulti returned %d items, want 200", len(m))
		}
		for k, it := range m {
			if string(it.Value) != "value-"+k {
				t.Fatalf("GetMulti %s = %q", k, it.Value)
			}
		}

		it := get("go:a")
		it.Value = []byte("alpha2")
		must("cas", c.CompareAndSwap(it))
		it.Value = []byte("alpha3")
		wantErr("cas stale", c.CompareAndSwap(it), memcache.ErrCASConflict)
		if it := get("go:a"); string(it.Value) != "alpha2" {
			t.Fatalf("after cas: %q", it.Value)
		}
		gone := get("go:b")
		must("delete for cas", c.Delete("go:b"))
		wantErr("cas deleted", c.CompareAndSwap(gone), memcache.ErrCacheMiss)

		must("set counter", c.Set(&memcache.Item{Key: "go:n", Value: []byte("10")}))
		if v, err := c.Increment("go:n", 5); err != nil || v != 15 {
			t.Fatalf("incr = %d, %v", v, err)
		}
		if v, err := c.Decrement("go:n", 20); err != nil || v != 0 {
			t.Fatalf("decr = %d, %v", v, err)
		}
		must("set max", c.Set(&memcache.Item{Key: "go:n", Value: []byte("18446744073709551615")}))
		if v, err := c.Increment("go:n", 2); err != nil || v != 1 {
			t.Fatalf("incr wrap = %d, %v", v, err)
		}
		_, err = c.Increment("go:nokey", 1)
		wantErr("incr missing", err, memcache.ErrCacheMiss)
		must("set text", c.Set(&memcache.Item{Key: "go:text", Value: []byte("abc")}))
		if _, err := c.Increment("go:text", 1); err == nil || !strings.Contains(err.Error(), "non-numeric") {
			t.Fatalf("incr non-numeric: err = %v", err)
		}

		must("touch", c.Touch("go:a", 100))
		wantErr("touch missing", c.Touch("go:nokey", 100), memcache.ErrCacheMiss)
		if it, err := c.GetAndTouch("go:a", 200); err != nil || string(it.Value) != "alpha2" {
			t.Fatalf("gat = %v, %v", it, err)
		}
		must("set expired", c.Set(&memcache.Item{Key: "go:exp", Value: []byte("x"), Expiration: -1}))
		_, err = c.Get("go:exp")
		wantErr("get expired", err, memcache.ErrCacheMiss)

		must("delete", c.Delete("go:a"))
		wantErr("delete missing", c.Delete("go:a"), memcache.ErrCacheMiss)
		_, err = c.Get("go:a")
		wantErr("get deleted", err, memcache.ErrCacheMiss)

		if err := c.Set(&memcache.Item{Key: strings.Repeat("k", 251), Value: []byte("x")}); err == nil {
			t.Fatal("set with a 251-byte key succeeded")
		}
		tooBig := make([]byte, 2<<20)
		if err := c.Set(&memcache.Item{Key: "go:huge", Value: tooBig}); err == nil {
			t.Fatal("set of a 2 MB value succeeded with the default -I 1m")
		}
		// The connection pool must still work after the server error.
		if it := get("go:m7"); string(it.Value) != "value-go:m7" || it.Flags != 7 {
			t.Fatalf("after too-large: %q flags %d", it.Value, it.Flags)
		}

		must("flush_all", c.FlushAll())
		_, err = c.Get("go:m7")
		wantErr("get after flush", err, memcache.ErrCacheMiss)
	})
}
