package bench

// The real environment of both harnesses: the processes under test and the
// load as child processes, pinned with taskset (under chrt -f when
// permitted), and their figures from /proc. newCompareEnv (below) and
// newProxiesEnv (proxies_env.go) set it up for their harness.

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/vbcache/vbcache/internal/tlsconf"
)

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat and /proc/stat
// times. It is 100 on every Linux architecture Go supports.
const clockTicks = 100

// realEnv is the env of an actual run. Its process table is what stop and
// cleanup work from; a goroutine per child waits for its exit.
type realEnv struct {
	log        io.Writer
	vbcache    string // the binary of the node, the proxy and the load
	memcached  string
	nutcracker string // proxies only
	dir        string // proxies only: the pool files and nutcracker's log; cleanup removes it
	loadCPU    string
	cpus       []int // the cores a run's busy time is read from
	rtAsked    bool  // chrt -f was asked for
	rt         bool  // and is permitted: every process and the load run under it
	rtRefused  string
	prio       int // SCHED_FIFO priority of the processes under test
	loadPrio   int // and of the load
	threads    int // worker threads of every server (-t, GOMAXPROCS); 0 is 1
	memMB      int // -m of every server; 0 is 1024

	// With TLS (CompareConfig.TLS): the servers' -o value naming their
	// certificate, and the CA file the load verifies them with.
	tlsOpt, tlsCA string

	mu    sync.Mutex // protects procs
	procs map[int]*child
}

// child is a process under test and the goroutine waiting for it.
type child struct {
	cmd    *exec.Cmd
	done   chan struct{} // closed when Wait returned
	stderr bytes.Buffer
}

// realConfig is what a harness asks of the real environment.
type realConfig struct {
	vbcache, memcached string   // binaries; "" means this executable and memcached from PATH
	cpus               []string // CPU lists of the cores a run is measured on
	loadCPU            string   // the CPU list of the load, and of the harness itself
	realTime           bool     // use chrt -f when permitted
	prio, loadPrio     int      // SCHED_FIFO priorities of the processes and of the load
	threads            int      // worker threads of every server (-t, and GOMAXPROCS for vbcache); 0 means 1
	memMB              int      // -m of every server; 0 means 1024
	log                io.Writer
}

func newRealEnv(ctx context.Context, rc realConfig) (*realEnv, error) {
	re := &realEnv{log: rc.log, vbcache: rc.vbcache, memcached: rc.memcached, loadCPU: rc.loadCPU,
		rtAsked: rc.realTime, prio: rc.prio, loadPrio: rc.loadPrio, threads: rc.threads, memMB: rc.memMB,
		procs: map[int]*child{}}
	var err error
	if re.vbcache == "" {
		if re.vbcache, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("bench: finding the vbcache binary: %w", err)
		}
		// A test binary started as "vbcache server …" runs its tests
		// again instead, and one that reaches a harness starts the
		// next: a chain of orphaned processes.
		if strings.HasSuffix(filepath.Base(re.vbcache), ".test") {
			return nil, fmt.Errorf("%w: this executable (%s) is a test binary, not vbcache: name the vbcache binary (Vbcache, --vbcache)",
				ErrInvalidConfig, re.vbcache)
		}
	}
	if re.memcached == "" {
		re.memcached = "memcached"
	}
	if re.memcached, err = exec.LookPath(re.memcached); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	if _, err := exec.LookPath("taskset"); err != nil {
		return nil, fmt.Errorf("bench: taskset is needed to pin the processes: %w", err)
	}
	for _, l := range rc.cpus {
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
	if rc.realTime {
		out, err := exec.CommandContext(ctx, "chrt", "-f", strconv.Itoa(rc.prio), "true").CombinedOutput()
		if err == nil {
			re.rt = true
		} else {
			re.rtRefused = fmt.Sprintf("chrt: %v %s", err, bytes.TrimSpace(out))
		}
	}
	// Keep the harness itself (it mostly waits) off the cores of the
	// processes under test.
	if err := exec.CommandContext(ctx, "taskset", "-a", "-p", "-c", rc.loadCPU, strconv.Itoa(os.Getpid())).Run(); err != nil {
		fmt.Fprintf(re.log, "warning: could not pin the harness to CPU %s: %v\n", rc.loadCPU, err)
	}
	return re, nil
}

// env is re as the runner sees it.
func (re *realEnv) env() *env {
	return &env{
		start:      re.start,
		stop:       re.stop,
		load:       re.load,
		cpu:        func(p *serverProc) (time.Duration, error) { return procCPU(p.Pid) },
		rss:        func(p *serverProc) (int64, error) { return procRSS(p.Pid) },
		items:      currItems,
		stats:      serverStats,
		cacheAside: cacheAside,
		quiesce:    waitHashStable,
		cores:      func() (coreTimes, error) { return readCoreTimes(re.cpus) },
		ncores:     len(re.cpus),
		now:        time.Now,
		settle:     func(ctx context.Context) { sleepCtx(ctx, time.Second) },
		cleanup:    re.cleanup,
	}
}

// rtNote says, for the report, how the processes are scheduled; on words
// the real-time case, given the kernel's throttle of real-time tasks to
// runtime µs of every period µs (throttled is false when there is none).
func (re *realEnv) rtNote(on func(runtime, period string, throttled bool) string) string {
	switch {
	case !re.rtAsked:
		return "disabled (--no-rt)"
	case !re.rt:
		return "not permitted (" + re.rtRefused + "); normal scheduling"
	}
	rt, _ := os.ReadFile("/proc/sys/kernel/sched_rt_runtime_us")
	period, _ := os.ReadFile("/proc/sys/kernel/sched_rt_period_us")
	r, p := strings.TrimSpace(string(rt)), strings.TrimSpace(string(period))
	return on(r, p, r != "" && r != "-1")
}

// machine describes the machine a harness ran on; Info and ProxiesInfo
// open with it.
type machine struct {
	Date      string `json:"date"`
	Host      string `json:"host"`
	CPU       string `json:"cpu"`
	Kernel    string `json:"kernel"`
	GoVersion string `json:"go_version"`
	Memcached string `json:"memcached"` // its version
}

func (re *realEnv) machine() machine {
	m := machine{Date: time.Now().UTC().Format(time.RFC3339), GoVersion: runtime.Version()}
	m.Host, _ = os.Hostname()
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.Lines(string(b)) {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	if out, err := exec.Command(re.memcached, "-V").Output(); err == nil {
		m.Memcached = strings.TrimSpace(string(out))
	}
	return m
}

// loadAvg returns the three load averages of /proc/loadavg.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}

// newCompareEnv sets up the real environment of a comparison (the servers
// on ServerCPU, the load on LoadCPU, both at RTPriority) and describes it.
func newCompareEnv(ctx context.Context, c *CompareConfig) (*env, Info, error) {
	rc := c.realConfig([]string{c.ServerCPU, c.LoadCPU}, c.RTPriority)
	rc.threads = c.Threads
	re, err := newRealEnv(ctx, rc)
	if err != nil {
		return nil, Info{}, err
	}
	if c.TLS {
		if err := re.makeTLS(); err != nil {
			re.cleanup()
			return nil, Info{}, err
		}
	}
	note := re.rtNote(func(runtime, period string, throttled bool) string {
		n := fmt.Sprintf("chrt -f %d for the servers and the load", c.RTPriority)
		if throttled {
			n += fmt.Sprintf(" (the kernel throttles real-time tasks to %s µs of every %s µs: a saturated server "+
				"is stopped for the rest of each period, which shows in p99.9 and max)", runtime, period)
		}
		return n
	})
	in := Info{machine: re.machine(), RealTime: re.rt, RTNote: note, ServerCPU: c.ServerCPU, LoadCPU: c.LoadCPU,
		ServerThreads: c.Threads, LoadThreads: c.place.loadThreads, LoadAvg: loadAvg(), ServerCmds: map[string]string{}}
	for _, k := range kindsOf(c.Metrics) {
		argv, env := re.serverArgv(k, "-p", "PORT", "-l", "127.0.0.1")
		in.ServerCmds[k] = commandLine(env, append(re.prefix(c.ServerCPU, re.prio), argv...))
	}
	in.LoadCmd = strings.Join(re.loadArgv(Config{Servers: []string{"127.0.0.1:PORT"}, Threads: max(c.place.loadThreads, 1), Clients: 50,
		Ratio: Ratio{1, 9}, DataSize: 100, KeyMax: 99_999, Duration: c.Duration, Seed: 1}), " ")
	fmt.Fprintf(c.Log, "real-time scheduling: %s\nload average at start: %s\n", note, in.LoadAvg)
	return re.env(), in, nil
}

// newHitRatioEnv sets up the real environment of a hit-ratio run (the
// servers on ServerCPU with -m MemoryMB, the harness and its driver on
// LoadCPU) and describes it.
func newHitRatioEnv(ctx context.Context, c *HitRatioConfig) (*env, HitRatioInfo, error) {
	re, err := newRealEnv(ctx, realConfig{vbcache: c.Vbcache, memcached: c.Memcached, cpus: []string{c.ServerCPU, c.LoadCPU},
		loadCPU: c.LoadCPU, realTime: !c.NoRealTime, prio: c.RTPriority, loadPrio: c.RTPriority, memMB: c.MemoryMB, log: c.Log})
	if err != nil {
		return nil, HitRatioInfo{}, err
	}
	note := re.rtNote(func(string, string, bool) string {
		return fmt.Sprintf("chrt -f %d for the servers", c.RTPriority)
	})
	in := HitRatioInfo{machine: re.machine(), RTNote: note, ServerCPU: c.ServerCPU, LoadCPU: c.LoadCPU,
		LoadAvg: loadAvg(), ServerCmds: map[string]string{}}
	for _, k := range kinds {
		argv, env := re.serverArgv(k, "-p", "PORT", "-l", "127.0.0.1")
		in.ServerCmds[k] = commandLine(env, append(re.prefix(c.ServerCPU, re.prio), argv...))
	}
	fmt.Fprintf(c.Log, "real-time scheduling: %s\nload average at start: %s\n", note, in.LoadAvg)
	return re.env(), in, nil
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// prefix is the pinning (and real-time) command that runs a command on
// cpus at SCHED_FIFO priority prio.
func (re *realEnv) prefix(cpus string, prio int) []string {
	var a []string
	if re.rt {
		a = append(a, "chrt", "-f", strconv.Itoa(prio))
	}
	return append(a, "taskset", "-c", cpus)
}

// commandLine is how a command with env added to its environment reads in
// a log or a report.
func commandLine(env, argv []string) string {
	return strings.Join(append(slices.Clone(env), argv...), " ")
}

// serverFlags are the flags of every server under test: threads worker
// threads (0: one), memMB MiB of memory (0: 1 GiB), no UDP, 4096
// connections.
func serverFlags(threads, memMB int) []string {
	return []string{"-t", strconv.Itoa(max(threads, 1)), "-m", strconv.Itoa(cmp.Or(memMB, 1024)), "-U", "0", "-c", "4096"}
}

// serverArgv is the command line of a server of kind (KindMemcached or
// KindVbcache) listening as listen says, and what it adds to the
// environment.
func (re *realEnv) serverArgv(kind string, listen ...string) (argv, env []string) {
	if re.tlsOpt != "" {
		listen = append(slices.Clip(listen), "-Z", "-o", re.tlsOpt)
	}
	flags := serverFlags(re.threads, re.memMB)
	if kind == KindVbcache || kind == KindVbcacheMetrics {
		// The node runs an event loop per thread that Go can run at
		// once (internal/server, loopsWanted): -t and GOMAXPROCS alike.
		return append(append([]string{re.vbcache, "server"}, flags...), listen...), []string{"GOMAXPROCS=" + strconv.Itoa(max(re.threads, 1))}
	}
	argv = append(append([]string{re.memcached}, flags...), listen...)
	if os.Geteuid() == 0 {
		argv = append(argv, "-u", "root")
	}
	return argv, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// start starts the process s describes on fresh ports, pinned to s.cpus,
// and waits until it accepts connections.
func (re *realEnv) start(ctx context.Context, s procSpec) ([]*serverProc, error) {
	var ports []int
	var listen []string
	for range max(s.ports, 1) {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		ports = append(ports, port)
		listen = append(listen, net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	}
	var argv, env []string
	switch {
	case s.kind == PathNutcracker || s.kind == PathVbcache:
		var err error
		if argv, env, err = re.proxyArgv(s.kind, listen[0], s.pool); err != nil {
			return nil, err
		}
	case s.ports > 0:
		argv, env = re.serverArgv(s.kind, "-l", strings.Join(listen, ","))
	default:
		argv, env = re.serverArgv(s.kind, "-p", strconv.Itoa(ports[0]), "-l", "127.0.0.1")
	}
	metricsURL := ""
	if s.kind == KindVbcacheMetrics {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		argv = append(argv, "--metrics-listen", addr)
		metricsURL = "http://" + addr + "/metrics"
	}
	argv = append(re.prefix(s.cpus, re.prio), argv...)
	p, err := re.spawn(ctx, s.kind, argv, env, ports[0])
	if err != nil {
		return nil, err
	}
	if metricsURL != "" {
		re.scrape(p, metricsURL)
	}
	p.Cmd = commandLine(env, argv)
	fmt.Fprintf(re.log, "started %s pid %d on %s: %s\n", s.kind, p.Pid, p.Addr, p.Cmd)
	ps := []*serverProc{p}
	for _, a := range listen[1:] {
		ps = append(ps, &serverProc{Kind: p.Kind, Addr: a, Pid: p.Pid, Cmd: p.Cmd})
	}
	return ps, nil
}

// spawn starts argv (with env added to the environment), registers it in
// the process table (so stop and cleanup find it) and waits, bounded,
// until port accepts connections.
func (re *realEnv) spawn(ctx context.Context, kind string, argv, env []string, port int) (*serverProc, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	ch := &child{cmd: cmd, done: make(chan struct{})}
	cmd.Stderr = &ch.stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", kind, err)
	}
	go func() { // owned by re: stop and cleanup wait for done
		cmd.Wait()
		close(ch.done)
	}()
	re.mu.Lock()
	re.procs[cmd.Process.Pid] = ch
	re.mu.Unlock()
	p := &serverProc{Kind: kind, Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), Pid: cmd.Process.Pid}
	for deadline := time.Now().Add(10 * time.Second); ; {
		nc, err := net.DialTimeout("tcp", p.Addr, time.Second)
		if err == nil {
			nc.Close()
			return p, nil
		}
		select {
		case <-ch.done:
			return nil, fmt.Errorf("%s exited at start: %s", kind, bytes.TrimSpace(ch.stderr.Bytes()))
		case <-ctx.Done():
			re.stop(p)
			return nil, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			re.stop(p)
			return nil, fmt.Errorf("%s did not accept connections within 10s", kind)
		}
	}
}

// scrape GETs url once a second, as a Prometheus server would, until p's
// process exits; a failed scrape is counted in the log at the end.
func (re *realEnv) scrape(p *serverProc, url string) {
	re.mu.Lock()
	ch := re.procs[p.Pid]
	re.mu.Unlock()
	if ch == nil {
		return
	}
	go func() { // owned by re: ends when the process does
		hc := &http.Client{Timeout: 2 * time.Second}
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		var scrapes, failed int
		for {
			select {
			case <-ch.done:
				fmt.Fprintf(re.log, "%s pid %d: %d scrapes of %s, %d failed\n", p.Kind, p.Pid, scrapes, url, failed)
				return
			case <-tick.C:
			}
			scrapes++
			resp, err := hc.Get(url)
			if err != nil {
				failed++
				continue
			}
			if _, err := io.Copy(io.Discard, resp.Body); err != nil || resp.StatusCode != http.StatusOK {
				failed++
			}
			resp.Body.Close()
		}
	}()
}

// stop stops p's process; the other ports of the same process then find
// nothing to stop.
func (re *realEnv) stop(p *serverProc) error {
	re.mu.Lock()
	ch := re.procs[p.Pid]
	delete(re.procs, p.Pid)
	re.mu.Unlock()
	if ch == nil {
		return nil
	}
	return stopChild(ch)
}

// stopChild sends SIGTERM, then SIGKILL after 5 s, and waits for the exit.
func stopChild(ch *child) error {
	ch.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-ch.done:
		return nil
	case <-time.After(5 * time.Second):
	}
	ch.cmd.Process.Kill()
	<-ch.done
	return errors.New("server did not stop on SIGTERM within 5s")
}

// cleanup stops whatever is still running and removes the scratch
// directory.
func (re *realEnv) cleanup() {
	re.mu.Lock()
	procs := re.procs
	re.procs = map[int]*child{}
	re.mu.Unlock()
	for _, ch := range procs {
		stopChild(ch)
	}
	if re.dir != "" {
		os.RemoveAll(re.dir)
	}
}

// loadArgv is the command line of the load cfg: "vbcache bench --json",
// pinned to the load's CPUs.
func (re *realEnv) loadArgv(cfg Config) []string {
	if re.tlsCA != "" && cfg.TLSCA == "" {
		cfg.TLSCA = re.tlsCA
	}
	argv := append(re.prefix(re.loadCPU, re.loadPrio), re.vbcache, "bench", "--json", "--no-progress")
	return append(argv, cfg.Args()...)
}

// load runs the load cfg and reads its result back.
func (re *realEnv) load(ctx context.Context, cfg Config) (*Result, time.Duration, error) {
	argv := re.loadArgv(cfg)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, 0, fmt.Errorf("%s: %v: %s", strings.Join(argv, " "), err, bytes.TrimSpace(stderr.Bytes()))
	}
	var r Result
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		return nil, 0, fmt.Errorf("reading the load's JSON: %w", err)
	}
	st := cmd.ProcessState
	return &r, st.UserTime() + st.SystemTime(), nil
}

// procCPU returns utime+stime of process pid (all its threads).
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	return parseProcStat(b)
}

// parseProcStat reads utime and stime (fields 14 and 15) from the
// contents of /proc/<pid>/stat. The command name (field 2) is in
// parentheses and may hold spaces, so fields are counted after the last ')'.
func parseProcStat(b []byte) (time.Duration, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, errors.New("bench: malformed /proc/<pid>/stat")
	}
	f := strings.Fields(string(b[i+1:])) // f[0] is field 3 (state)
	if len(f) < 13 {
		return 0, errors.New("bench: short /proc/<pid>/stat")
	}
	ut, err1 := strconv.ParseUint(f[11], 10, 64)
	st, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, errors.New("bench: bad times in /proc/<pid>/stat")
	}
	return time.Duration(ut+st) * time.Second / clockTicks, nil
}

// procRSS returns VmRSS of process pid in bytes.
func procRSS(pid int) (int64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	return parseVmRSS(b)
}

func parseVmRSS(b []byte) (int64, error) {
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(v)
			if len(f) == 2 && f[1] == "kB" {
				n, err := strconv.ParseInt(f[0], 10, 64)
				return n * 1024, err
			}
		}
	}
	return 0, errors.New("bench: no VmRSS in /proc/<pid>/status")
}

// parseCPUList parses a taskset CPU list such as "0", "0-1" or "0,2".
func parseCPUList(s string) ([]int, error) {
	var out []int
	for part := range strings.SplitSeq(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		b := a
		if isRange && err == nil {
			b, err = strconv.Atoi(hi)
		}
		if err != nil || a < 0 || b < a {
			return nil, fmt.Errorf("%w: bad CPU list %q", ErrInvalidConfig, s)
		}
		for i := a; i <= b; i++ {
			out = append(out, i)
		}
	}
	return out, nil
}

// onlineCPUs returns the CPUs the kernel has online
// (/sys/devices/system/cpu/online), or 0..NumCPU-1 when it cannot say.
func onlineCPUs() []int {
	if b, err := os.ReadFile("/sys/devices/system/cpu/online"); err == nil {
		if cpus, err := parseCPUList(strings.TrimSpace(string(b))); err == nil && len(cpus) > 0 {
			return cpus
		}
	}
	cpus := make([]int, runtime.NumCPU())
	for i := range cpus {
		cpus[i] = i
	}
	return cpus
}

// formatCPUList writes cpus (ascending) as a taskset CPU list, runs of
// consecutive CPUs as ranges: "0", "0-3", "4-7,12".
func formatCPUList(cpus []int) string {
	var b strings.Builder
	for i := 0; i < len(cpus); {
		j := i
		for j+1 < len(cpus) && cpus[j+1] == cpus[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(cpus[i]))
		if j > i {
			b.WriteString("-" + strconv.Itoa(cpus[j]))
		}
		i = j + 1
	}
	return b.String()
}

func readCoreTimes(cpus []int) (coreTimes, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return coreTimes{}, err
	}
	return parseCoreTimes(b, cpus)
}

// parseCoreTimes sums, over cpus, the busy time (user nice system irq
// softirq) and the steal time of /proc/stat's "cpuN" lines.
func parseCoreTimes(b []byte, cpus []int) (coreTimes, error) {
	var ct coreTimes
	found := 0
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		if len(f) < 9 || !strings.HasPrefix(f[0], "cpu") || f[0] == "cpu" {
			continue
		}
		n, err := strconv.Atoi(f[0][3:])
		if err != nil || !containsInt(cpus, n) {
			continue
		}
		found++
		v := make([]uint64, 8)
		for i := range v {
			v[i], _ = strconv.ParseUint(f[i+1], 10, 64)
		}
		// user nice system idle iowait irq softirq steal
		ct.Busy += time.Duration(v[0]+v[1]+v[2]+v[5]+v[6]) * time.Second / clockTicks
		ct.Steal += time.Duration(v[7]) * time.Second / clockTicks
	}
	if found == 0 {
		return ct, errors.New("bench: no matching cpu lines in /proc/stat")
	}
	return ct, nil
}

func containsInt(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// currItems asks a server for "stats" and returns curr_items.
func currItems(ctx context.Context, p *serverProc) (uint64, error) {
	st, err := serverStats(ctx, p)
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(st["curr_items"], 10, 64)
}

// serverStats returns the general "stats" of p, name to value.
func serverStats(ctx context.Context, p *serverProc) (map[string]string, error) {
	d := net.Dialer{Timeout: 5 * time.Second}
	nc, err := d.DialContext(ctx, "tcp", p.Addr)
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := nc.Write([]byte("stats\r\n")); err != nil {
		return nil, err
	}
	r := bufio.NewReader(nc)
	st := map[string]string{}
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return nil, err
		}
		if line == "END\r\n" {
			return st, nil
		}
		if f := strings.Fields(line); len(f) == 3 && f[0] == "STAT" {
			st[f[1]] = f[2]
		}
	}
}

// waitHashStable waits (up to a minute) until p's hash table has the size
// its items call for: memcached doubles its table, in a background thread,
// whenever curr_items passes 1.5 × 2^hash_power_level, and with the worker
// busy on the same core that thread lags far behind a fast load (a million
// items can end the load at power 17 and reach 20 seconds later; between
// doublings hash_is_expanding reads 0). Memory is only comparable once the
// table is final.
func waitHashStable(ctx context.Context, p *serverProc) {
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		st, err := serverStats(ctx, p)
		if err != nil {
			return
		}
		items, err1 := strconv.ParseUint(st["curr_items"], 10, 64)
		power, err2 := strconv.ParseUint(st["hash_power_level"], 10, 64)
		if err1 != nil || err2 != nil || power >= 63 {
			return
		}
		if st["hash_is_expanding"] != "1" && items <= 3*(uint64(1)<<power)/2 {
			return
		}
		sleepCtx(ctx, 100*time.Millisecond)
	}
}

// makeTLS makes a CA and a server certificate for 127.0.0.1 in a new
// scratch directory (removed by cleanup) for a run with TLS on both sides.
func (re *realEnv) makeTLS() error {
	dir, err := os.MkdirTemp("", "vbcache-bench-tls-")
	if err != nil {
		return err
	}
	re.dir = dir
	notAfter := time.Now().Add(7 * 24 * time.Hour)
	ca, err := tlsconf.NewCA("vbcache bench CA", notAfter)
	if err != nil {
		return err
	}
	cert, key, err := ca.Issue(tlsconf.Leaf{Name: "bench server", Hosts: []string{"127.0.0.1"}, Server: true, NotAfter: notAfter})
	if err != nil {
		return err
	}
	files := map[string][]byte{"ca.pem": ca.CertPEM(), "server.pem": cert, "server-key.pem": key}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			return err
		}
	}
	re.tlsCA = filepath.Join(dir, "ca.pem")
	re.tlsOpt = "ssl_chain_cert=" + filepath.Join(dir, "server.pem") + ",ssl_key=" + filepath.Join(dir, "server-key.pem")
	return nil
}
