package memcache

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	gomemcache "github.com/bradfitz/gomemcache/memcache"

	"github.com/vbcache/vbcache/internal/clock"
)

// TestRecordedPlacement checks every selector against the placements real
// libraries produced (testdata/placement/*.txt, recorded by
// "go test ./test/interop -record": each library wrote keys to four nodes,
// and each node was asked which keys it held). The files cover pylibmc
// (ketama_weighted and its modula default), php-memcached
// (OPT_LIBKETAMA_COMPATIBLE and default), Cache::Memcached and
// python-memcached (weighted, and their rehash around a dead server),
// gomemcache, npm memcached and spymemcached (ketama, weighted and not),
// over lists with a host name, a port-11211 node and weights, with UTF-8
// and 250-byte keys. The ketama-spy files name "localhost", which
// spymemcached hashes as "localhost/127.0.0.1:port": the test resolves it
// the way the recording machine did, wherever it runs.
func TestRecordedPlacement(t *testing.T) {
	files, _ := filepath.Glob("testdata/placement/*.txt")
	if len(files) == 0 {
		t.Fatal("no recorded placements in testdata/placement")
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".txt"), func(t *testing.T) {
			dist, servers, dead, want := readPlacement(t, f)
			list, err := ParseServers(servers)
			if err != nil {
				t.Fatal(err)
			}
			var sel ServerSelector
			if dead != "" {
				if sel, err = NewSelector(dist, list, &Options{Rehash: true}); err != nil {
					t.Fatal(err)
				}
				if m, ok := sel.(*Modulo); !ok || !m.MarkDead(dead) {
					t.Fatalf("dead server %s not in the list of a modulo selector", dead)
				}
			} else if sel, err = NewSelector(dist, list, &Options{LookupHost: localhostOnly}); err != nil {
				t.Fatal(err)
			}
			for _, kv := range want {
				a, err := sel.PickServer(kv[0])
				if err != nil {
					t.Fatal(err)
				}
				if a.String() != kv[1] {
					t.Errorf("%s: key %q on %s, recorded %s", dist, kv[0], a, kv[1])
				}
			}
			t.Logf("%d keys match", len(want))
		})
	}
}

func readPlacement(t *testing.T, name string) (dist, servers, dead string, kv [][2]string) {
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := sc.Text()
		switch {
		case l == "" || strings.HasPrefix(l, "#"):
		case strings.HasPrefix(l, "distribution "):
			dist = strings.TrimPrefix(l, "distribution ")
		case strings.HasPrefix(l, "servers "):
			servers = strings.TrimPrefix(l, "servers ")
		case strings.HasPrefix(l, "dead "):
			dead = strings.TrimPrefix(l, "dead ")
		default:
			i := strings.LastIndexByte(l, ' ')
			k, err := strconv.Unquote(l[:i])
			if err != nil {
				t.Fatalf("%s: %q: %v", name, l, err)
			}
			kv = append(kv, [2]string{k, l[i+1:]})
		}
	}
	return dist, servers, dead, kv
}

// TestServerListMatchesGomemcache compares ServerList with gomemcache's own
// on random keys, weighted by repetition.
func TestServerListMatchesGomemcache(t *testing.T) {
	addrs := []string{"127.0.0.1:1001", "127.0.0.1:1002", "127.0.0.1:1002", "127.0.0.1:1003", "127.0.0.1:11211"}
	var ours ServerList
	var theirs gomemcache.ServerList
	if err := ours.SetServers(addrs...); err != nil {
		t.Fatal(err)
	}
	if err := theirs.SetServers(addrs...); err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 5000; i++ {
		k := fmt.Sprintf("k%x", r.Uint64())
		a, _ := ours.PickServer(k)
		b, _ := theirs.PickServer(k)
		if a.String() != b.String() {
			t.Fatalf("%q: ours %s, gomemcache %s", k, a, b)
		}
	}
}

func TestOneAtATime(t *testing.T) {
	// Jenkins' one-at-a-time of "a" and the empty string, and the
	// sign extension of bytes >= 0x80 that libhashkit's char pointer gives
	// (checked against pylibmc through the recorded UTF-8 keys).
	if got := oneAtATime(nil); got != 0 {
		t.Errorf("oaat(\"\") = %#x", got)
	}
	if got := oneAtATime([]byte("a")); got != 0xca2e9442 {
		t.Errorf("oaat(a) = %#x, want 0xca2e9442", got)
	}
	if oneAtATime([]byte{0xc3}) == jenkinsUnsigned([]byte{0xc3}) {
		t.Error("bytes >= 0x80 must be sign-extended as in libhashkit")
	}
}

func jenkinsUnsigned(key []byte) uint32 {
	var v uint32
	for _, c := range key {
		v += uint32(c)
		v += v << 10
		v ^= v >> 6
	}
	v += v << 3
	v ^= v >> 11
	v += v << 15
	return v
}

func TestParseServers(t *testing.T) {
	for in, want := range map[string][]Server{
		"a:1,b:2:3":              {{"a:1", 1}, {"b:2", 3}},
		"host":                   {{"host:11211", 1}},
		"[::1]:11211:4, [::1]:5": {{"[::1]:11211", 4}, {"[::1]:5", 1}},
		"/tmp/mc.sock":           {{"/tmp/mc.sock", 1}},
		"/tmp/mc.sock:3":         {{"/tmp/mc.sock", 3}}, // twemproxy's "path:weight"
		"/tmp/a:b/mc.sock":       {{"/tmp/a:b/mc.sock", 1}},
	} {
		got, err := ParseServers(in)
		if err != nil || fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("ParseServers(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "a:b:c:d", "a:1:x"} {
		if _, err := ParseServers(bad); err == nil {
			t.Errorf("ParseServers(%q) succeeded", bad)
		}
	}
}

func TestKetamaPoints(t *testing.T) {
	servers := []Server{{"a:1", 1}, {"b:1", 1}, {"c:11211", 1}}
	k, _ := NewKetama(KetamaLibmemcached, servers, nil)
	if got := fmt.Sprint(k.Points()); got != "[160 160 160]" {
		t.Fatalf("points = %s, want 160 each", got)
	}
	w, _ := NewKetama(KetamaLibmemcached, []Server{{"a:1", 1}, {"b:1", 2}, {"c:1", 3}, {"d:1", 1}}, nil)
	// floor(w/7 * 40 * 4) * 4
	if got := fmt.Sprint(w.Points()); got != "[88 180 272 88]" {
		t.Fatalf("weighted points = %s", got)
	}
	// The label: libmemcached drops :11211, spymemcached keeps it (and
	// adds the address of a name).
	if k.servers[2].label != "c" {
		t.Errorf("libmemcached label %q", k.servers[2].label)
	}
	s, _ := NewKetama(KetamaSpy, servers, &Options{LookupHost: fakeLookup})
	if s.servers[2].label != "c/10.0.0.3:11211" {
		t.Errorf("spy label %q", s.servers[2].label)
	}
	// Without port 11211 (and without colliding points) the two formats
	// place every key alike.
	np := []Server{{"10.0.0.1:11210", 1}, {"10.0.0.2:11210", 1}, {"10.0.0.3:11210", 1}}
	a, _ := NewKetama(KetamaLibmemcached, np, nil)
	b, _ := NewKetama(KetamaSpy, np, nil)
	for i := 0; i < 2000; i++ {
		key := "key-" + strconv.Itoa(i)
		x, _ := a.PickServer(key)
		y, _ := b.PickServer(key)
		if x != y && x.String() != y.String() {
			t.Fatalf("%s: %s vs %s", key, x, y)
		}
	}
}

// TestKetamaAutoEject: after FailureLimit failures a server leaves the
// continuum (only its keys move), and comes back after RetryTimeout on
// the fake clock.
func TestKetamaAutoEject(t *testing.T) {
	clk := clock.NewFake(time.Unix(1000, 0))
	servers := []Server{{"a:1", 1}, {"b:1", 1}, {"c:1", 1}, {"d:1", 1}}
	k, _ := NewKetama(KetamaLibmemcached, servers, &Options{AutoEject: true, FailureLimit: 2, RetryTimeout: 30 * time.Second, Now: clk.Now})
	before := map[string]string{}
	for i := 0; i < 1000; i++ {
		key := "k" + strconv.Itoa(i)
		a, _ := k.PickServer(key)
		before[key] = a.String()
	}
	b := NewAddr("b:1")
	k.serverFailed(b)
	if k.Points()[1] == 0 {
		t.Fatal("ejected after one failure; limit is 2")
	}
	k.serverOK(b) // a success resets the count
	k.serverFailed(b)
	if k.Points()[1] == 0 {
		t.Fatal("ejected although a success came in between")
	}
	k.serverFailed(b)
	if got := fmt.Sprint(k.Points()); got != "[160 0 160 160]" {
		t.Fatalf("after ejecting b: points %s", got)
	}
	for key, was := range before {
		a, _ := k.PickServer(key)
		if was != "b:1" && a.String() != was {
			t.Fatalf("%s moved from %s to %s though its server is up", key, was, a)
		}
		if a.String() == "b:1" {
			t.Fatalf("%s still on the ejected server", key)
		}
	}
	clk.Advance(29 * time.Second)
	if a, _ := k.PickServer("k1"); k.Points()[1] != 0 {
		t.Fatalf("back before the retry timeout (%s)", a)
	}
	clk.Advance(time.Second)
	k.PickServer("k1")
	for key, was := range before {
		if a, _ := k.PickServer(key); a.String() != was {
			t.Fatalf("after readmission %s is on %s, was %s", key, a, was)
		}
	}
}

// TestModuloRehash: Cache::Memcached's rehash, and the dead mark expiring
// on the fake clock.
func TestModuloRehash(t *testing.T) {
	clk := clock.NewFake(time.Unix(1000, 0))
	servers := []Server{{"a:1", 1}, {"b:1", 2}, {"c:1", 1}}
	m, _ := NewModulo(HashCRC15, servers, &Options{Rehash: true, RetryTimeout: 20 * time.Second, Now: clk.Now})
	plain, _ := NewModulo(HashCRC15, servers, nil)
	m.serverFailed(NewAddr("b:1"))
	moved := 0
	for i := 0; i < 500; i++ {
		key := "k" + strconv.Itoa(i)
		a, _ := m.PickServer(key)
		p, _ := plain.PickServer(key)
		if a.String() == "b:1" {
			t.Fatalf("%s on the dead server", key)
		}
		if p.String() != "b:1" && a.String() != p.String() {
			t.Fatalf("%s moved off a live server", key)
		}
		if p.String() == "b:1" {
			moved++
			// Perl: hv += crc15(try . key), try from 1.
			hv := crc15(key)
			for try := 1; ; try++ {
				hv += crc15(strconv.Itoa(try) + key)
				if want := plain.buckets[hv%4].String(); want != "b:1" {
					if a.String() != want {
						t.Fatalf("%s: rehash gives %s, want %s", key, a, want)
					}
					break
				}
			}
		}
	}
	if moved == 0 {
		t.Fatal("no key on b")
	}
	clk.Advance(20 * time.Second)
	for i := 0; i < 100; i++ {
		key := "k" + strconv.Itoa(i)
		a, _ := m.PickServer(key)
		p, _ := plain.PickServer(key)
		if a.String() != p.String() {
			t.Fatalf("%s still rehashed after the retry timeout", key)
		}
	}
}

func crc15(s string) uint32 {
	m := &Modulo{hash: HashCRC15}
	return m.keyHash(s)
}

func TestVBucketSelector(t *testing.T) {
	v, err := NewVBucket([]string{"a:1", "b:1", "c:1"}, 1024)
	if err != nil {
		t.Fatal(err)
	}
	// DESIGN.md §2 vectors: hello → 528, foo → 115, key-0 → 491 of 1024;
	// the spread map puts vbucket i on server i % 3.
	for key, vb := range map[string]int{"hello": 528, "foo": 115, "key-0": 491} {
		if got := v.VBucketOf(key); got != vb {
			t.Errorf("vbucket(%s) = %d, want %d", key, got, vb)
		}
		a, _ := v.PickServer(key)
		if want := []string{"a:1", "b:1", "c:1"}[vb%3]; a.String() != want {
			t.Errorf("%s on %s, want %s", key, a, want)
		}
	}
	cfg := `{"rev":2,"revEpoch":1,"vBucketServerMap":{"hashAlgorithm":"CRC","numReplicas":0,"serverList":["x:1","y:1"],"vBucketMap":[[1],[0],[1],[0]]}}`
	if _, err := v.SetConfig([]byte(cfg)); err == nil {
		t.Fatal("a config with another vbucket count was accepted")
	}
	w, err := NewVBucketFromJSON([]byte(cfg))
	if err != nil {
		t.Fatal(err)
	}
	// hello: h 13840 % 4 = 0 → row [1] → y:1
	if a, _ := w.PickServer("hello"); a.String() != "y:1" {
		t.Fatalf("hello on %s", a)
	}
	older := strings.Replace(cfg, `"rev":2`, `"rev":1`, 1)
	if ok, err := w.SetConfig([]byte(older)); ok || err != nil {
		t.Fatalf("older config taken: %v %v", ok, err)
	}
	newer := strings.Replace(strings.Replace(cfg, `"rev":2`, `"rev":3`, 1), `[[1],[0]`, `[[0],[0]`, 1)
	if ok, err := w.SetConfig([]byte(newer)); !ok || err != nil {
		t.Fatalf("newer config refused: %v %v", ok, err)
	}
	if a, _ := w.PickServer("hello"); a.String() != "x:1" {
		t.Fatalf("after the new map hello on %s", a)
	}
}

func TestPickServerAllocs(t *testing.T) {
	servers := []Server{{"a:1", 1}, {"b:1", 2}, {"c:11211", 1}}
	for _, d := range Distributions {
		sel, err := NewSelector(d.Name, servers, &Options{LookupHost: fakeLookup})
		if err != nil {
			t.Fatal(err)
		}
		key := strings.Repeat("k", 200)
		if n := testing.AllocsPerRun(100, func() { sel.PickServer(key) }); n != 0 {
			t.Errorf("%s: PickServer allocates %v times", d.Name, n)
		}
	}
}

// localhostOnly resolves "localhost" as the machines that recorded
// testdata/placement did (/etc/hosts: 127.0.0.1 and ::1) and nothing
// else, so the recorded ketama-spy placements check anywhere.
func localhostOnly(host string) ([]string, error) {
	if host == "localhost" {
		return []string{"::1", "127.0.0.1"}, nil
	}
	return nil, fmt.Errorf("lookup %s: no such host", host)
}

// fakeLookup resolves a, b, c, … to 10.0.0.1, 10.0.0.2, …
func fakeLookup(host string) ([]string, error) {
	if len(host) == 1 && host[0] >= 'a' && host[0] <= 'z' {
		return []string{"10.0.0." + strconv.Itoa(int(host[0]-'a'+1))}, nil
	}
	return nil, fmt.Errorf("lookup %s: no such host", host)
}

// TestSpyLabel pins spymemcached 2.12.3's SPYMEMCACHED node keys, which
// are Java 17's InetSocketAddress.toString() less a leading "/" (probed
// with AddrUtil.getAddresses: "localhost/127.0.0.1:1", "/127.0.0.1:2",
// "/127.0.0.2:11211", "/[0:0:0:0:0:0:0:1]:3").
func TestSpyLabel(t *testing.T) {
	lookup := func(host string) ([]string, error) {
		switch host {
		case "localhost":
			return []string{"::1", "127.0.0.1"}, nil // Java prefers IPv4
		case "v6only":
			return []string{"2001:db8::a", "2001:db8::b"}, nil
		}
		return nil, fmt.Errorf("lookup %s: no such host", host)
	}
	for _, c := range []struct {
		addr, want string
	}{
		{"localhost:1", "localhost/127.0.0.1:1"},
		{"127.0.0.1:2", "127.0.0.1:2"},
		{"127.0.0.2:11211", "127.0.0.2:11211"},
		{"[::1]:3", "[0:0:0:0:0:0:0:1]:3"},
		{"[2001:DB8::ff00:42]:4", "[2001:db8:0:0:0:0:ff00:42]:4"},
		{"[::ffff:10.1.2.3]:5", "10.1.2.3:5"}, // Java makes it an Inet4Address
		{"v6only:6", "v6only/[2001:db8:0:0:0:0:0:a]:6"},
		{"nowhere:7", "nowhere/<unresolved>:7"},
	} {
		k, err := NewKetama(KetamaSpy, []Server{{Addr: c.addr}}, &Options{LookupHost: lookup})
		if err != nil {
			t.Fatal(err)
		}
		if got := k.servers[0].label; got != c.want {
			t.Errorf("%s: label %q, want %q", c.addr, got, c.want)
		}
	}
}

// TestModuloPythonRehash: python-memcached's _get_server drops the key
// after the first pick: hash = cmemcache_hash(str(hash) + str(i)) for
// i = 0, 1, …, ten picks in all.
func TestModuloPythonRehash(t *testing.T) {
	servers := []Server{{"a:1", 1}, {"b:1", 2}, {"c:1", 1}}
	m, _ := NewModulo(HashCRC15NonZero, servers, &Options{Rehash: true})
	plain, _ := NewModulo(HashCRC15NonZero, servers, nil)
	m.MarkDead("b:1")
	moved := 0
	for i := 0; i < 500; i++ {
		key := "k" + strconv.Itoa(i)
		a, _ := m.PickServer(key)
		p, _ := plain.PickServer(key)
		if p.String() != "b:1" {
			if a.String() != p.String() {
				t.Fatalf("%s moved off a live server", key)
			}
			continue
		}
		moved++
		hv := plain.keyHash(key)
		want := ""
		for try := 0; try < 9 && want == ""; try++ {
			hv = crc15NonZero([]byte(strconv.Itoa(int(hv)) + strconv.Itoa(try)))
			if s := plain.buckets[hv%4].String(); s != "b:1" {
				want = s
			}
		}
		if a.String() != want {
			t.Fatalf("%s: rehash gives %s, want %s", key, a, want)
		}
	}
	if moved == 0 {
		t.Fatal("no key on b")
	}
	// Every server dead: ten picks, then no server.
	m.MarkDead("a:1")
	m.MarkDead("c:1")
	if _, err := m.PickServer("k1"); err != ErrNoServers {
		t.Fatalf("all dead: %v, want ErrNoServers", err)
	}
}

// TestModuloPythonZeroHash: "key-35014" has a 15-bit CRC of 0, which
// python-memcached's cmemcache_hash turns into 1 (checked with the
// library: cmemcache_hash(b"key-35014") == 1), so the two modulo
// distributions put it on different servers.
func TestModuloPythonZeroHash(t *testing.T) {
	servers := []Server{{"a:1", 1}, {"b:1", 1}, {"c:1", 1}, {"d:1", 1}}
	perl, _ := NewSelector("modulo", servers, nil)
	py, _ := NewSelector("modulo-python", servers, nil)
	if a, _ := perl.PickServer("key-35014"); a.String() != "a:1" {
		t.Errorf("modulo: key-35014 on %s, want a:1 (hash 0)", a)
	}
	if a, _ := py.PickServer("key-35014"); a.String() != "b:1" {
		t.Errorf("modulo-python: key-35014 on %s, want b:1 (hash 1)", a)
	}
}
