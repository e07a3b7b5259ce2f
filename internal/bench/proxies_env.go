package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ErrNoNutcracker is returned by Proxies when twemproxy is not installed.
var ErrNoNutcracker = errors.New("bench: nutcracker (twemproxy) not found; install it with " +
	"\"apt-get install nutcracker\" (Debian, Ubuntu) or pass --nutcracker PATH")

// proxiesReal holds the real environment of a proxies run: a realEnv (for
// its process table, its load runner and its stop/cleanup), the proxies'
// own pinning prefix and a scratch directory for the pool files and logs.
type proxiesReal struct {
	re         *realEnv
	cfg        *ProxiesConfig
	nutcracker string
	rt         bool // chrt -f for every process
	dir        string
	cmds       []string
	poolFile   string
}

func newProxiesEnv(ctx context.Context, c *ProxiesConfig) (*proxiesEnv, error) {
	nut := c.Nutcracker
	if nut == "" {
		nut = "nutcracker"
	}
	nut, err := exec.LookPath(nut)
	if err != nil {
		return nil, fmt.Errorf("%w (%v)", ErrNoNutcracker, err)
	}
	cc := &CompareConfig{Vbcache: c.Vbcache, Memcached: c.Memcached, ServerCPU: c.ProxyCPU, LoadCPU: c.LoadCPU,
		NoRealTime: true, RTPriority: c.RTPriority, Log: c.Log, Duration: c.Duration}
	if _, err := exec.LookPath("taskset"); err != nil {
		return nil, fmt.Errorf("bench: taskset is needed to pin the processes: %w", err)
	}
	re := &realEnv{cfg: cc, procs: map[int]*child{}}
	if re.vbcache = c.Vbcache; re.vbcache == "" {
		if re.vbcache, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("bench: finding the vbcache binary: %w", err)
		}
	}
	if re.memcached = c.Memcached; re.memcached == "" {
		re.memcached = "memcached"
	}
	if re.memcached, err = exec.LookPath(re.memcached); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	for _, l := range []string{c.ProxyCPU, c.LoadCPU, c.MemcachedCPU} {
		cs, err := parseCPUList(l)
		if err != nil {
			return nil, err
		}
		for _, cpu := range cs {
			if !slices.Contains(re.cpus, cpu) {
				re.cpus = append(re.cpus, cpu)
			}
		}
	}
	pr := &proxiesReal{re: re, cfg: c, nutcracker: nut}
	if pr.dir, err = os.MkdirTemp("", "vbcache-bench-proxies-"); err != nil {
		return nil, err
	}
	rtNote := "disabled (--no-rt)"
	if !c.NoRealTime {
		out, err := exec.CommandContext(ctx, "chrt", "-f", strconv.Itoa(c.RTPriority), "true").CombinedOutput()
		if err == nil {
			pr.rt, re.rt = true, true
			re.loadPrio = c.LoadRTPriority
			rtNote = fmt.Sprintf("chrt -f %d for the proxies and memcached, chrt -f %d for the load", c.RTPriority, c.LoadRTPriority)
			switch {
			case c.MemcachedCPU == c.ProxyCPU:
				rtNote += "; memcached shares the proxies' core, at the same priority, and the load has one of its own"
			case c.MemcachedCPU != c.LoadCPU:
				// memcached on a core of its own: nothing shared to describe
			case c.LoadRTPriority < c.RTPriority:
				rtNote += "; memcached preempts the load on their shared core as soon as a request reaches it"
			case c.LoadRTPriority == c.RTPriority:
				rtNote += "; memcached and the load, at the same priority on one core, take turns whenever one blocks"
			}
			rt, _ := os.ReadFile("/proc/sys/kernel/sched_rt_runtime_us")
			period, _ := os.ReadFile("/proc/sys/kernel/sched_rt_period_us")
			if r, p := strings.TrimSpace(string(rt)), strings.TrimSpace(string(period)); r != "" && r != "-1" {
				rtNote += fmt.Sprintf("; the kernel throttles real-time tasks to %s µs of every %s µs, "+
					"so a saturated core stalls for the rest of each period (visible in p99.9)", r, p)
			}
		} else {
			rtNote = fmt.Sprintf("not permitted (chrt: %v %s); normal scheduling", err, bytes.TrimSpace(out))
		}
	}
	// Keep the harness itself (it mostly waits) off the proxies' core.
	if err := exec.CommandContext(ctx, "taskset", "-a", "-p", "-c", c.LoadCPU, strconv.Itoa(os.Getpid())).Run(); err != nil {
		fmt.Fprintf(c.Log, "warning: could not pin the harness to CPU %s: %v\n", c.LoadCPU, err)
	}
	fmt.Fprintf(c.Log, "real-time scheduling: %s\n", rtNote)
	info := pr.info(rtNote)
	return &proxiesEnv{
		startPool:  pr.startPool,
		startProxy: pr.startProxy,
		stop:       re.stop,
		load:       re.load,
		cpu:        func(p *serverProc) (time.Duration, error) { return procCPU(p.Pid) },
		cores:      func() (coreTimes, error) { return readCoreTimes(re.cpus) },
		now:        time.Now,
		info: func() ProxiesInfo {
			in := info
			in.Commands = pr.cmds
			in.PoolFile = pr.poolFile
			return in
		},
		cleanup: func() {
			re.cleanup()
			os.RemoveAll(pr.dir)
		},
	}, nil
}

func (pr *proxiesReal) info(rtNote string) ProxiesInfo {
	in := ProxiesInfo{
		Date:      time.Now().UTC().Format(time.RFC3339),
		GoVersion: runtime.Version(),
		RTNote:    rtNote,
		ProxyCPU:  pr.cfg.ProxyCPU,
		LoadCPU:   pr.cfg.LoadCPU,
		ServerCPU: pr.cfg.MemcachedCPU,
	}
	in.Host, _ = os.Hostname()
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		in.Kernel = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		in.LoadAvg = strings.Join(strings.Fields(string(b))[:3], " ")
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.Lines(string(b)) {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				in.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	if out, err := exec.Command(pr.re.memcached, "-V").Output(); err == nil {
		in.Memcached = strings.TrimSpace(string(out))
	}
	// nutcracker -V prints "This is nutcracker-0.5.0" on stderr.
	if out, err := exec.Command(pr.nutcracker, "-V").CombinedOutput(); err == nil {
		first, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
		in.Nutcracker = strings.TrimPrefix(first, "This is ")
	}
	return in
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

// startPool starts the pool: one memcached process (-t 1) listening on n
// ports, each port one server of the pool. The servers share one core,
// and two memcached processes at the same SCHED_FIFO priority on one core
// starve each other: under a pipelined load one worker never blocks, and
// the other's clients waited out their timeout (direct runs of the pipe
// workload, 25 connections in each of two rounds). One worker thread
// serving every port takes its connections in turn, as a core would.
func (pr *proxiesReal) startPool(ctx context.Context, n int) ([]*serverProc, error) {
	var listen []string
	var ports []int
	for range n {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		ports = append(ports, port)
		listen = append(listen, net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	}
	argv := []string{pr.re.memcached, "-t", "1", "-m", "1024", "-U", "0", "-c", "4096", "-l", strings.Join(listen, ",")}
	if os.Geteuid() == 0 {
		argv = append(argv, "-u", "root")
	}
	full := append(pr.re.prefix(pr.cfg.MemcachedCPU), argv...)
	p, err := pr.startChild(ctx, "memcached", full, nil, ports[0])
	if err != nil {
		return nil, err
	}
	ps := []*serverProc{p}
	for _, a := range listen[1:] {
		ps = append(ps, &serverProc{Kind: p.Kind, Addr: a, Pid: p.Pid})
	}
	return ps, nil
}

func (pr *proxiesReal) startProxy(ctx context.Context, kind string, pool []string) (*serverProc, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	file := filepath.Join(pr.dir, kind+".yml")
	if err := os.WriteFile(file, []byte(poolYAML(net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), pool)), 0o644); err != nil {
		return nil, err
	}
	if pr.poolFile == "" {
		pr.poolFile = poolYAML("127.0.0.1:PORT", pool)
	}
	prefix := pr.re.prefix(pr.cfg.ProxyCPU)
	var argv, env []string
	switch kind {
	case PathNutcracker:
		stats, err := freePort()
		if err != nil {
			return nil, err
		}
		argv = []string{pr.nutcracker, "-c", file, "-s", strconv.Itoa(stats), "-a", "127.0.0.1",
			"-o", filepath.Join(pr.dir, "nutcracker.log"), "-p", filepath.Join(pr.dir, "nutcracker.pid")}
	case PathVbcache:
		argv = []string{pr.re.vbcache, "proxy", "-c", file}
		env = []string{"GOMAXPROCS=1"}
	default:
		return nil, fmt.Errorf("bench: unknown proxy %q", kind)
	}
	return pr.startChild(ctx, kind, append(prefix, argv...), env, port)
}

// startChild starts argv (with env added) through the realEnv, so stop and
// cleanup find it, and records its command line for the report.
func (pr *proxiesReal) startChild(ctx context.Context, kind string, argv, env []string, port int) (*serverProc, error) {
	p, err := pr.re.spawn(ctx, kind, argv, env, port)
	if err != nil {
		return nil, err
	}
	line := strings.Join(append(append([]string{}, env...), argv...), " ")
	pr.cmds = append(pr.cmds, line)
	fmt.Fprintf(pr.cfg.Log, "started %s pid %d on %s: %s\n", kind, p.Pid, p.Addr, line)
	return p, nil
}
