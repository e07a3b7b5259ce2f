package bench

// What the real environment (env.go) does only for the proxies harness:
// find nutcracker, keep the pool files in a scratch directory, and start
// the two proxies from them.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// ErrNoNutcracker is returned by Proxies when twemproxy is not installed.
var ErrNoNutcracker = errors.New("bench: nutcracker (twemproxy) not found; install it with " +
	"\"apt-get install nutcracker\" (Debian, Ubuntu) or pass --nutcracker PATH")

// newProxiesEnv sets up the real environment of a proxies run (the proxies
// on ProxyCPU and memcached on MemcachedCPU at RTPriority, the load on
// LoadCPU at LoadRTPriority) and describes it. It fails first, with
// ErrNoNutcracker, when nutcracker is not installed.
func newProxiesEnv(ctx context.Context, c *ProxiesConfig) (*env, ProxiesInfo, error) {
	nut := c.Nutcracker
	if nut == "" {
		nut = "nutcracker"
	}
	nut, err := exec.LookPath(nut)
	if err != nil {
		return nil, ProxiesInfo{}, fmt.Errorf("%w (%v)", ErrNoNutcracker, err)
	}
	re, err := newRealEnv(ctx, c.realConfig([]string{c.ProxyCPU, c.LoadCPU, c.MemcachedCPU}, c.LoadRTPriority))
	if err != nil {
		return nil, ProxiesInfo{}, err
	}
	re.nutcracker = nut
	if re.dir, err = os.MkdirTemp("", "vbcache-bench-proxies-"); err != nil {
		return nil, ProxiesInfo{}, err
	}
	note := re.rtNote(func(runtime, period string, throttled bool) string {
		n := fmt.Sprintf("chrt -f %d for the proxies and memcached, chrt -f %d for the load", c.RTPriority, c.LoadRTPriority)
		switch {
		case c.MemcachedCPU == c.ProxyCPU:
			n += "; memcached shares the proxies' core, at the same priority, and the load has one of its own"
		case c.MemcachedCPU != c.LoadCPU:
			// memcached on a core of its own: nothing shared to describe
		case c.LoadRTPriority < c.RTPriority:
			n += "; memcached preempts the load on their shared core as soon as a request reaches it"
		case c.LoadRTPriority == c.RTPriority:
			n += "; memcached and the load, at the same priority on one core, take turns whenever one blocks"
		}
		if throttled {
			n += fmt.Sprintf("; the kernel throttles real-time tasks to %s µs of every %s µs, "+
				"so a saturated core stalls for the rest of each period (visible in p99.9)", runtime, period)
		}
		return n
	})
	fmt.Fprintf(c.Log, "real-time scheduling: %s\n", note)
	in := ProxiesInfo{machine: re.machine(), RTNote: note, ProxyCPU: c.ProxyCPU, LoadCPU: c.LoadCPU,
		ServerCPU: c.MemcachedCPU, LoadAvg: loadAvg()}
	// nutcracker -V prints "This is nutcracker-0.5.0" on stderr.
	if out, err := exec.Command(nut, "-V").CombinedOutput(); err == nil {
		first, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
		in.Nutcracker = strings.TrimPrefix(first, "This is ")
	}
	return re.env(), in, nil
}

// poolYAML is the twemproxy pool file both proxies read: one named pool,
// ketama over md5, no ejection. Only the listen address differs between
// the two proxies' copies.
func poolYAML(listen string, servers []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "bench:\n  listen: %s\n  hash: md5\n  distribution: ketama\n  auto_eject_hosts: false\n  timeout: 2000\n  servers:\n", listen)
	for _, s := range servers {
		fmt.Fprintf(&b, "    - %s:1\n", s)
	}
	return b.String()
}

// proxyArgv writes the pool file of proxy kind (PathNutcracker or
// PathVbcache) listening on listen in front of pool, and returns its
// command line and what it adds to the environment.
func (re *realEnv) proxyArgv(kind, listen string, pool []string) (argv, env []string, err error) {
	file := filepath.Join(re.dir, kind+".yml")
	if err := os.WriteFile(file, []byte(poolYAML(listen, pool)), 0o644); err != nil {
		return nil, nil, err
	}
	if kind == PathVbcache {
		return []string{re.vbcache, "proxy", "-c", file}, []string{"GOMAXPROCS=1"}, nil
	}
	stats, err := freePort()
	if err != nil {
		return nil, nil, err
	}
	return []string{re.nutcracker, "-c", file, "-s", strconv.Itoa(stats), "-a", "127.0.0.1",
		"-o", filepath.Join(re.dir, "nutcracker.log"), "-p", filepath.Join(re.dir, "nutcracker.pid")}, nil, nil
}
