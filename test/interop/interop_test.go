// Package interop checks that vbcache's Go client places keys exactly where
// the real client libraries do, in both directions: a library writes keys
// to four vbcache nodes and the memcache package, with the matching
// selector, finds every one (and predicts the server of every one); then
// the memcache package writes and the library reads.
//
// The libraries: pylibmc (ketama_weighted, and its modula default),
// php-memcached (OPT_LIBKETAMA_COMPATIBLE, and its default), Cache::Memcached
// and python-memcached (modulo, and their rehash around a dead server),
// gomemcache, npm memcached (installed at test time from
// node/package-lock.json), spymemcached (KetamaNodeLocator with KETAMA_HASH,
// unweighted and weighted; scripts/SpyKeys.java is compiled with javac at
// test time against Debian's jar). The server lists
// mix a host name ("localhost") with addresses, one node on port 11211
// (on 127.0.0.2, so that a memcached on 127.0.0.1:11211 does not matter),
// and weights; the keys include UTF-8 and 250-byte keys.
//
// With -record the placements the libraries produced are written to
// memcache/testdata/placement/, where the memcache package's unit tests
// check the selectors against them without any library installed.
//
// A missing library skips its test with the Debian package to install; with
// CI=true it fails instead.
package interop

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	gomemcache "github.com/bradfitz/gomemcache/memcache"

	"github.com/vbcache/vbcache/memcache"
	"github.com/vbcache/vbcache/test/nodeproc"
)

var record = flag.Bool("record", false, "write the libraries' placements to memcache/testdata/placement/")

var (
	vbcacheBin string
	buildErr   error
	shared     *cluster // started by TestMain, used by every test in turn
	clusterErr error
)

func TestMain(m *testing.M) {
	flag.Parse()
	dir, err := os.MkdirTemp("", "vbcache-interop-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	vbcacheBin, buildErr = nodeproc.BuildVbcache(dir)
	var stop func()
	if buildErr == nil {
		shared, stop, clusterErr = newCluster()
	}
	code := m.Run()
	if stop != nil {
		stop()
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

// cluster is four running nodes and the server lists that name them.
type cluster struct {
	addrs  []string // dialable addresses, 127.0.0.x:port
	names  []string // as the clients are told: index 0 is "localhost:port"
	plain  string   // "name,name,…" (all weight 1)
	weight string   // "name:w,…"
}

var weights = []int{2, 1, 3, 1}

// startCluster returns the shared cluster, emptied.
func startCluster(t *testing.T) *cluster {
	t.Helper()
	if buildErr != nil {
		t.Fatalf("cannot build vbcache: %v", buildErr)
	}
	if clusterErr != nil {
		t.Fatalf("cannot start the nodes: %v", clusterErr)
	}
	shared.flush(t)
	return shared
}

// newCluster starts the four nodes; stop stops them.
func newCluster() (c *cluster, stop func(), err error) {
	c = &cluster{}
	var stops []func()
	stop = func() {
		for _, f := range stops {
			f()
		}
	}
	for i := 0; i < 4; i++ {
		var addr string
		if i == 2 {
			var f func()
			addr, f, err = start11211()
			if err != nil {
				stop()
				return nil, nil, err
			}
			stops = append(stops, f)
		} else {
			n, err := nodeproc.StartNoCleanup(nodeproc.Vbcache, vbcacheBin)
			if err != nil {
				stop()
				return nil, nil, err
			}
			stops = append(stops, n.Stop)
			addr = n.Addr
		}
		name := addr
		if i == 0 {
			name = "localhost:" + addr[strings.LastIndexByte(addr, ':')+1:]
		}
		c.addrs = append(c.addrs, addr)
		c.names = append(c.names, name)
	}
	var p, w []string
	for i, n := range c.names {
		p = append(p, n)
		w = append(w, n+":"+strconv.Itoa(weights[i]))
	}
	c.plain, c.weight = strings.Join(p, ","), strings.Join(w, ",")
	return c, stop, nil
}

// start11211 starts a node on port 11211 of the first free loopback
// address among 127.0.0.2–127.0.0.9.
func start11211() (addr string, stop func(), err error) {
	for i := 2; i <= 9; i++ {
		host := "127.0.0." + strconv.Itoa(i)
		addr = host + ":11211"
		if l, err := net.Listen("tcp", addr); err != nil {
			continue
		} else {
			l.Close()
		}
		cmd := exec.Command(vbcacheBin, "server", "-p", "11211", "-U", "0", "-l", host)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			return "", nil, err
		}
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		stop := func() {
			cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-done:
			case <-time.After(3 * time.Second):
				cmd.Process.Kill()
				<-done
			}
		}
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if nc, err := net.DialTimeout("tcp", addr, 200*time.Millisecond); err == nil {
				nc.Close()
				return addr, stop, nil
			}
		}
		stop()
		return "", nil, fmt.Errorf("vbcache on %s did not start", addr)
	}
	return "", nil, errors.New("no loopback address 127.0.0.2-9 with port 11211 free")
}

// keys returns the test keys: a–z, key-0…key-199, UTF-8 keys and 250-byte
// keys.
func keys() []string {
	var ks []string
	for c := 'a'; c <= 'z'; c++ {
		ks = append(ks, string(c))
	}
	for i := 0; i < 200; i++ {
		ks = append(ks, "key-"+strconv.Itoa(i))
	}
	ks = append(ks, "ключ", "clé-été", "鍵-キー", "🔑-emoji", "Ω≈ç√∫", "naïve-café-ü")
	for _, c := range "xyz€" {
		k := strings.Repeat(string(c), 250/len(string(c)))
		k += strings.Repeat("p", 250-len(k))
		ks = append(ks, k)
	}
	return ks
}

// asciiOnly drops the keys with bytes >= 0x80.
func asciiOnly(ks []string) []string {
	var out []string
	for _, k := range ks {
		if strings.IndexFunc(k, func(r rune) bool { return r >= 0x80 }) < 0 {
			out = append(out, k)
		}
	}
	return out
}

func writeKeyFile(t *testing.T, ks []string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "keys.txt")
	if err := os.WriteFile(f, []byte(strings.Join(ks, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

// run runs a library script and fails the test on a non-zero exit.
func run(t *testing.T, argv ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(argv[:2], " "), err, out)
	}
	t.Logf("%s", strings.TrimSpace(string(out)))
}

// flush empties every node.
func (c *cluster) flush(t *testing.T) {
	t.Helper()
	for _, a := range c.addrs {
		mc := memcache.New(a)
		if err := mc.FlushAll(); err != nil {
			t.Fatalf("flush %s: %v", a, err)
		}
		mc.Close()
	}
}

// placement asks every node directly which of ks it holds, and returns
// key → the server's name. A key on no node or on two fails the test.
func (c *cluster) placement(t *testing.T, ks []string) map[string]string {
	t.Helper()
	where := make(map[string]string)
	for i, a := range c.addrs {
		mc := memcache.New(a)
		mc.Timeout = 5 * time.Second
		got, err := mc.GetMulti(ks)
		mc.Close()
		if err != nil {
			t.Fatalf("GetMulti from %s: %v", a, err)
		}
		for k, it := range got {
			if string(it.Value) != "v:"+k {
				t.Fatalf("%s holds %q = %q", a, k, it.Value)
			}
			if w, dup := where[k]; dup {
				t.Fatalf("key %q on %s and %s", k, w, c.names[i])
			}
			where[k] = c.names[i]
		}
	}
	for _, k := range ks {
		if where[k] == "" {
			t.Fatalf("key %q is on no node", k)
		}
	}
	return where
}

// lib is one library configuration and the selector that must match it.
type lib struct {
	name    string   // test and vector file name
	argv    []string // script command line up to (excluding) mode
	dist    string   // library's own distribution argument
	sel     string   // memcache distribution
	weights bool     // use the weighted server list
	ascii   bool     // the library refuses non-ASCII keys (php-memcached)
	dead    string   // a listed server that refuses connections (rehash)
}

// check runs both directions for one library configuration.
func check(t *testing.T, c *cluster, l lib) {
	ks := keys()
	if l.ascii {
		ks = asciiOnly(ks)
	}
	kf := writeKeyFile(t, ks)
	list := c.plain
	if l.weights {
		list = c.weight
	}
	servers, err := memcache.ParseServers(list)
	if err != nil {
		t.Fatal(err)
	}
	sel, err := memcache.NewSelector(l.sel, servers, nil)
	if err != nil {
		t.Fatal(err)
	}

	// Library writes; vbcache's selector predicts; vbcache's client reads.
	c.flush(t)
	run(t, append(append([]string{}, l.argv...), "write", l.dist, list, kf)...)
	where := c.placement(t, ks)
	wrong := 0
	for _, k := range ks {
		a, err := sel.PickServer(k)
		if err != nil {
			t.Fatal(err)
		}
		if a.String() != where[k] {
			if wrong++; wrong <= 5 {
				t.Errorf("%s put %q on %s, selector %s says %s", l.name, k, where[k], l.sel, a)
			}
		}
	}
	if wrong > 0 {
		t.Fatalf("%d of %d keys placed differently", wrong, len(ks))
	}
	mc := memcache.NewFromSelector(sel)
	mc.Timeout = 5 * time.Second
	defer mc.Close()
	got, err := mc.GetMulti(ks)
	if err != nil || len(got) != len(ks) {
		t.Fatalf("vbcache client found %d of %d keys written by %s: %v", len(got), len(ks), l.name, err)
	}
	if *record {
		recordPlacement(t, l, list, ks, where)
	}

	// vbcache's client writes; the library reads.
	c.flush(t)
	for _, k := range ks {
		if err := mc.Set(&memcache.Item{Key: k, Value: []byte("v:" + k)}); err != nil {
			t.Fatalf("set %q: %v", k, err)
		}
	}
	run(t, append(append([]string{}, l.argv...), "read", l.dist, list, kf)...)
}

// recordPlacement writes a vector file for the memcache unit tests:
//
//	# comment lines
//	distribution <memcache distribution>
//	servers <host:port[:weight],…>
//	dead <host:port>    (only for a rehash run: this server was down)
//	<key as Go-quoted string> <server>
func recordPlacement(t *testing.T, l lib, list string, ks []string, where map[string]string) {
	root, err := nodeproc.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "memcache", "testdata", "placement")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# Recorded by test/interop -record: where %s put each key\n", l.name)
	fmt.Fprintf(&b, "# (found by asking each node), %s.\n", time.Now().UTC().Format("2006-01-02"))
	fmt.Fprintf(&b, "distribution %s\nservers %s\n", l.sel, list)
	if l.dead != "" {
		fmt.Fprintf(&b, "dead %s\n", l.dead)
	}
	sorted := append([]string(nil), ks...)
	sort.Strings(sorted)
	for _, k := range sorted {
		fmt.Fprintf(&b, "%s %s\n", strconv.Quote(k), where[k])
	}
	if err := os.WriteFile(filepath.Join(dir, l.name+".txt"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// debianPython returns Debian's python3 if it can import module.
func debianPython(t *testing.T, module, pkg string) string {
	t.Helper()
	for _, py := range []string{"/usr/bin/python3", "python3"} {
		if p, err := exec.LookPath(py); err == nil && exec.Command(p, "-c", "import "+module).Run() == nil {
			return p
		}
	}
	nodeproc.Absent(t, fmt.Sprintf("python3 module %s not importable (package %s)", module, pkg))
	return ""
}

func TestPylibmc(t *testing.T) {
	py := debianPython(t, "pylibmc", "python3-pylibmc")
	c := startCluster(t)
	argv := []string{py, "scripts/pylibmc_keys.py"}
	t.Run("ketama_weighted", func(t *testing.T) {
		check(t, c, lib{name: "pylibmc-ketama-weighted", argv: argv, dist: "ketama", sel: "ketama", weights: true})
	})
	t.Run("ketama_equal", func(t *testing.T) {
		check(t, c, lib{name: "pylibmc-ketama", argv: argv, dist: "ketama", sel: "ketama"})
	})
	t.Run("default_modula", func(t *testing.T) {
		check(t, c, lib{name: "pylibmc-modula", argv: argv, dist: "oaat", sel: "modulo-oaat", weights: true})
	})
}

func TestPHPMemcached(t *testing.T) {
	php := nodeproc.Need(t, "php-cli", "php")
	if out, _ := exec.Command(php, "-r", "echo class_exists('Memcached') ? 'yes' : 'no';").Output(); string(out) != "yes" {
		nodeproc.Absent(t, "PHP extension memcached not loaded (package php-memcached)")
	}
	c := startCluster(t)
	argv := []string{php, "scripts/php_keys.php"}
	t.Run("libketama_compatible", func(t *testing.T) {
		check(t, c, lib{name: "php-memcached-ketama-weighted", argv: argv, dist: "ketama", sel: "ketama", weights: true, ascii: true})
	})
	t.Run("default_modula", func(t *testing.T) {
		check(t, c, lib{name: "php-memcached-modula", argv: argv, dist: "oaat", sel: "modulo-oaat", ascii: true})
	})
}

func needPerl(t *testing.T) string {
	perl := nodeproc.Need(t, "perl", "perl")
	if exec.Command(perl, "-MCache::Memcached", "-e", "1").Run() != nil {
		nodeproc.Absent(t, "perl module Cache::Memcached not installed (package libcache-memcached-perl)")
	}
	return perl
}

func TestCacheMemcached(t *testing.T) {
	perl := needPerl(t)
	c := startCluster(t)
	argv := []string{perl, "scripts/perl_keys.pl"}
	t.Run("weighted", func(t *testing.T) {
		check(t, c, lib{name: "cache-memcached-weighted", argv: argv, dist: "modulo", sel: "modulo", weights: true})
	})
	t.Run("equal", func(t *testing.T) {
		check(t, c, lib{name: "cache-memcached", argv: argv, dist: "modulo", sel: "modulo"})
	})
}

// TestCacheMemcachedRehash lists a dead server among live ones: Perl moves
// that server's keys with its rehash, and so must Modulo with Rehash
// (through the client's reaction to the failed connection).
func TestCacheMemcachedRehash(t *testing.T) {
	perl := needPerl(t)
	c := startCluster(t)
	checkRehash(t, c, lib{name: "cache-memcached-rehash", argv: []string{perl, "scripts/perl_keys.pl"}, dist: "rehash", sel: "modulo"})
}

// checkRehash runs both directions for a library that moves keys off a
// dead server, with a server list that has one: the library writes, the
// selector with Options.Rehash (told of the dead server by the client's
// failed connection) must find every key where the library put it; then
// the Go client writes and the library reads.
func checkRehash(t *testing.T, c *cluster, l lib) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close() // nothing listens there now: connections are refused
	list := c.names[0] + "," + dead + "," + c.names[1] + ":2," + c.names[2] + "," + c.names[3]
	ks := keys()
	kf := writeKeyFile(t, ks)
	c.flush(t)
	run(t, append(append([]string{}, l.argv...), "write", l.dist, list, kf)...)
	where := c.placement(t, ks)

	servers, _ := memcache.ParseServers(list)
	sel, err := memcache.NewSelector(l.sel, servers, &memcache.Options{Rehash: true})
	if err != nil {
		t.Fatal(err)
	}
	plain, err := memcache.NewSelector(l.sel, servers, nil)
	if err != nil {
		t.Fatal(err)
	}
	mc := memcache.NewFromSelector(sel)
	mc.Timeout = 2 * time.Second
	defer mc.Close()
	moved := 0
	for _, k := range ks {
		it, err := mc.Get(k) // the first key on the dead server marks it dead
		if err != nil || string(it.Value) != "v:"+k {
			t.Fatalf("get %q (%s put it on %s): %v", k, l.name, where[k], err)
		}
		if a, _ := sel.PickServer(k); a.String() != where[k] {
			t.Fatalf("%q: %s put it on %s, selector %s says %s", k, l.name, where[k], l.sel, a)
		}
		if a, _ := plain.PickServer(k); a.String() == dead {
			moved++
		}
	}
	if moved == 0 {
		t.Fatal("no key hashed to the dead server; the test proves nothing")
	}
	t.Logf("%d of %d keys rehashed off the dead server %s, all %d found where %s put them", moved, len(ks), dead, len(ks), l.name)
	if *record {
		recordPlacement(t, lib{name: l.name, sel: l.sel, dead: dead}, list, ks, where)
	}
	// The reverse: vbcache writes with rehash, the library reads.
	c.flush(t)
	for _, k := range ks {
		if err := mc.Set(&memcache.Item{Key: k, Value: []byte("v:" + k)}); err != nil {
			t.Fatal(err)
		}
	}
	run(t, append(append([]string{}, l.argv...), "read", l.dist, list, kf)...)
}

func TestPythonMemcached(t *testing.T) {
	py := debianPython(t, "memcache", "python3-memcache")
	c := startCluster(t)
	argv := []string{py, "scripts/python_memcache_keys.py"}
	t.Run("weighted", func(t *testing.T) {
		check(t, c, lib{name: "python-memcached-weighted", argv: argv, dist: "modulo", sel: "modulo-python", weights: true})
	})
	t.Run("equal", func(t *testing.T) {
		check(t, c, lib{name: "python-memcached", argv: argv, dist: "modulo", sel: "modulo-python"})
	})
	t.Run("rehash", func(t *testing.T) {
		checkRehash(t, c, lib{name: "python-memcached-rehash", argv: argv, dist: "rehash", sel: "modulo-python"})
	})
}

// spymemcachedJar is where Debian's libspymemcached-java puts the library
// (it needs nothing but the JDK).
const spymemcachedJar = "/usr/share/java/spymemcached.jar"

// TestSpymemcached compiles scripts/SpyKeys.java against Debian's
// spymemcached and checks KetamaNodeLocator with KETAMA_HASH, as the
// ConnectionFactoryBuilder makes it (Locator.CONSISTENT, no weights) and
// with weights (only its constructor takes them).
func TestSpymemcached(t *testing.T) {
	java := nodeproc.Need(t, "a JRE, package default-jre-headless", "java")
	javac := nodeproc.Need(t, "a JDK, package default-jdk-headless", "javac")
	if _, err := os.Stat(spymemcachedJar); err != nil {
		nodeproc.Absent(t, fmt.Sprintf("%s missing (package libspymemcached-java)", spymemcachedJar))
	}
	classes := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, javac, "-d", classes, "-cp", spymemcachedJar, "scripts/SpyKeys.java").CombinedOutput(); err != nil {
		t.Fatalf("javac SpyKeys.java: %v\n%s", err, out)
	}
	c := startCluster(t)
	argv := []string{java, "-cp", spymemcachedJar + string(os.PathListSeparator) + classes, "SpyKeys"}
	t.Run("ketama", func(t *testing.T) {
		check(t, c, lib{name: "spymemcached-ketama", argv: argv, dist: "ketama", sel: "ketama-spy"})
	})
	t.Run("ketama_weighted", func(t *testing.T) {
		check(t, c, lib{name: "spymemcached-ketama-weighted", argv: argv, dist: "ketama-weighted", sel: "ketama-spy", weights: true})
	})
}

func TestGomemcache(t *testing.T) {
	c := startCluster(t)
	ks := keys()
	for _, weighted := range []bool{false, true} {
		t.Run(fmt.Sprintf("weighted=%v", weighted), func(t *testing.T) {
			list := c.plain
			if weighted {
				list = c.weight
			}
			servers, _ := memcache.ParseServers(list)
			// gomemcache weights a server by listing it repeatedly.
			var expanded []string
			for _, s := range servers {
				for i := 0; i < max(1, s.Weight); i++ {
					expanded = append(expanded, s.Addr)
				}
			}
			gc := gomemcache.New(expanded...)
			gc.Timeout = 5 * time.Second
			defer gc.Close()
			sel, err := memcache.NewSelector("modulo-crc32", servers, nil)
			if err != nil {
				t.Fatal(err)
			}
			mc := memcache.NewFromSelector(sel)
			mc.Timeout = 5 * time.Second
			defer mc.Close()

			c.flush(t)
			for _, k := range ks {
				if err := gc.Set(&gomemcache.Item{Key: k, Value: []byte("v:" + k)}); err != nil {
					t.Fatal(err)
				}
			}
			where := c.placement(t, ks)
			for _, k := range ks {
				if a, _ := sel.PickServer(k); a.String() != where[k] {
					t.Fatalf("gomemcache put %q on %s, selector says %s", k, where[k], a)
				}
			}
			if got, err := mc.GetMulti(ks); err != nil || len(got) != len(ks) {
				t.Fatalf("found %d of %d: %v", len(got), len(ks), err)
			}
			if *record {
				name := "gomemcache"
				if weighted {
					name += "-weighted"
				}
				recordPlacement(t, lib{name: name, sel: "modulo-crc32"}, list, ks, where)
			}
			c.flush(t)
			for _, k := range ks {
				if err := mc.Set(&memcache.Item{Key: k, Value: []byte("v:" + k)}); err != nil {
					t.Fatal(err)
				}
			}
			got, err := gc.GetMulti(ks)
			if err != nil || len(got) != len(ks) {
				t.Fatalf("gomemcache found %d of %d: %v", len(got), len(ks), err)
			}
		})
	}
}

func TestNpmMemcached(t *testing.T) {
	node := nodeproc.Need(t, "nodejs", "node", "nodejs")
	modules := npmInstall(t)
	c := startCluster(t)
	t.Setenv("NODE_PATH", modules)
	argv := []string{node, "scripts/node_keys.js"}
	t.Run("weighted", func(t *testing.T) {
		check(t, c, lib{name: "npm-memcached-weighted", argv: argv, dist: "ketama", sel: "ketama", weights: true})
	})
	t.Run("equal", func(t *testing.T) {
		check(t, c, lib{name: "npm-memcached", argv: argv, dist: "ketama", sel: "ketama"})
	})
}

// npmInstall installs node/package-lock.json's packages (npm memcached)
// into a cache directory keyed by the lock file's content, once, and
// returns its node_modules path.
func npmInstall(t *testing.T) string {
	t.Helper()
	npm := nodeproc.Need(t, "npm (package npm)", "npm")
	lock, err := os.ReadFile("node/package-lock.json")
	if err != nil {
		t.Fatal(err)
	}
	pkg, err := os.ReadFile("node/package.json")
	if err != nil {
		t.Fatal(err)
	}
	h := fnv(append(append([]byte{}, pkg...), lock...))
	dir := filepath.Join(os.TempDir(), fmt.Sprintf("vbcache-interop-npm-%016x", h))
	modules := filepath.Join(dir, "node_modules")
	if _, err := os.Stat(filepath.Join(modules, "memcached", "package.json")); err == nil {
		return modules
	}
	tmp, err := os.MkdirTemp(os.TempDir(), "vbcache-interop-npm-tmp-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	os.WriteFile(filepath.Join(tmp, "package.json"), pkg, 0o644)
	os.WriteFile(filepath.Join(tmp, "package-lock.json"), lock, 0o644)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund", "--loglevel=error")
	cmd.Dir = tmp
	if out, err := cmd.CombinedOutput(); err != nil {
		nodeproc.Absent(t, fmt.Sprintf("npm ci (npm memcached) failed: %v\n%s", err, out))
	}
	os.RemoveAll(dir)
	if err := os.Rename(tmp, dir); err != nil && !os.IsExist(err) {
		t.Fatal(err)
	}
	return modules
}

func fnv(b []byte) uint64 {
	h := uint64(14695981039346656037)
	for _, c := range b {
		h ^= uint64(c)
		h *= 1099511628211
	}
	return h
}
