package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat and /proc/stat
// times. It is 100 on every Linux architecture Go supports.
const clockTicks = 100

// realEnv is the env of an actual comparison: child processes pinned with
// taskset (under chrt -f when permitted) and figures from /proc.
type realEnv struct {
	cfg       *CompareConfig
	vbcache   string
	memcached string
	rt        bool
	loadPrio  int   // SCHED_FIFO priority of the load under rt; 0 means cfg.RTPriority
	cpus      []int // server and load cores, for /proc/stat

	mu    sync.Mutex // protects procs
	procs map[int]*child
}

// child is a server process and the goroutine waiting for it.
type child struct {
	cmd    *exec.Cmd
	done   chan struct{} // closed when Wait returned
	stderr bytes.Buffer
}

func newRealEnv(ctx context.Context, c *CompareConfig) (*env, error) {
	re := &realEnv{cfg: c, vbcache: c.Vbcache, memcached: c.Memcached, procs: map[int]*child{}}
	var err error
	if re.vbcache == "" {
		if re.vbcache, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("bench: finding the vbcache binary: %w", err)
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
	for _, l := range []string{c.ServerCPU, c.LoadCPU} {
		cs, err := parseCPUList(l)
		if err != nil {
			return nil, err
		}
		re.cpus = append(re.cpus, cs...)
	}
	rtNote := "disabled (--no-rt)"
	if !c.NoRealTime {
		out, err := exec.CommandContext(ctx, "chrt", "-f", strconv.Itoa(c.RTPriority), "true").CombinedOutput()
		if err == nil {
			re.rt = true
			rtNote = fmt.Sprintf("chrt -f %d for the servers and the load", c.RTPriority)
			rt, _ := os.ReadFile("/proc/sys/kernel/sched_rt_runtime_us")
			period, _ := os.ReadFile("/proc/sys/kernel/sched_rt_period_us")
			r, p := strings.TrimSpace(string(rt)), strings.TrimSpace(string(period))
			if r != "" && r != "-1" {
				rtNote += fmt.Sprintf(" (the kernel throttles real-time tasks to %s µs of every %s µs: a saturated server "+
					"is stopped for the rest of each period, which shows in p99.9 and max)", r, p)
			}
		} else {
			rtNote = fmt.Sprintf("not permitted (chrt: %v %s); normal scheduling", err, bytes.TrimSpace(out))
		}
	}
	// Keep the harness itself (it mostly waits) off the server's core.
	if err := exec.CommandContext(ctx, "taskset", "-a", "-p", "-c", c.LoadCPU, strconv.Itoa(os.Getpid())).Run(); err != nil {
		fmt.Fprintf(c.Log, "warning: could not pin the harness to CPU %s: %v\n", c.LoadCPU, err)
	}
	info := re.info(rtNote)
	fmt.Fprintf(c.Log, "real-time scheduling: %s\nload average at start: %s\n", rtNote, info.LoadAvg)
	return &env{
		start:   re.start,
		stop:    re.stop,
		load:    re.load,
		cpu:     func(p *serverProc) (time.Duration, error) { return procCPU(p.Pid) },
		rss:     func(p *serverProc) (int64, error) { return procRSS(p.Pid) },
		items:   currItems,
		quiesce: waitHashStable,
		cores:   func() (coreTimes, error) { return readCoreTimes(re.cpus) },
		now:     time.Now,
		settle:  func(ctx context.Context) { sleepCtx(ctx, time.Second) },
		info:    func() Info { return info },
		cleanup: re.cleanup,
	}, nil
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// prefix is the pinning (and real-time) command that runs argv on cpus.
func (re *realEnv) prefix(cpus string) []string { return re.prefixAt(cpus, re.cfg.RTPriority) }

// prefixAt is prefix with the SCHED_FIFO priority prio.
func (re *realEnv) prefixAt(cpus string, prio int) []string {
	var a []string
	if re.rt {
		a = append(a, "chrt", "-f", strconv.Itoa(prio))
	}
	return append(a, "taskset", "-c", cpus)
}

// serverArgv is the command line of a server of kind listening on port.
func (re *realEnv) serverArgv(kind string, port int) (argv, env []string) {
	common := []string{"-t", "1", "-m", "1024", "-U", "0", "-c", "4096", "-p", strconv.Itoa(port), "-l", "127.0.0.1"}
	if kind == KindMemcached {
		argv = append([]string{re.memcached}, common...)
		if os.Geteuid() == 0 {
			argv = append(argv, "-u", "root")
		}
		return argv, nil
	}
	return append([]string{re.vbcache, "server"}, common...), []string{"GOMAXPROCS=1"}
}

func (re *realEnv) info(rtNote string) Info {
	in := Info{
		Date:       time.Now().UTC().Format(time.RFC3339),
		GoVersion:  runtime.Version(),
		RealTime:   re.rt,
		RTNote:     rtNote,
		ServerCPU:  re.cfg.ServerCPU,
		LoadCPU:    re.cfg.LoadCPU,
		ServerCmds: map[string]string{},
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
	if out, err := exec.Command(re.memcached, "-V").Output(); err == nil {
		in.Memcached = strings.TrimSpace(string(out))
	}
	for _, k := range kinds {
		argv, env := re.serverArgv(k, 0)
		for i := range argv {
			if i > 0 && argv[i-1] == "-p" {
				argv[i] = "PORT"
			}
		}
		in.ServerCmds[k] = strings.Join(append(append(env, re.prefix(re.cfg.ServerCPU)...), argv...), " ")
	}
	in.LoadCmd = strings.Join(append(append(re.prefix(re.cfg.LoadCPU), re.vbcache, "bench", "--json", "--no-progress"),
		(&Config{Servers: []string{"127.0.0.1:PORT"}, Threads: 1, Clients: 50, Ratio: Ratio{1, 9}, DataSize: 100,
			KeyMax: 99_999, Duration: re.cfg.Duration, Seed: 1}).Args()...), " ")
	return in
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (re *realEnv) start(ctx context.Context, kind string) (*serverProc, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	argv, env := re.serverArgv(kind, port)
	full := append(re.prefix(re.cfg.ServerCPU), argv...)
	p, err := re.spawn(ctx, kind, full, env, port)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(re.cfg.Log, "started %s pid %d on %s: %s\n", kind, p.Pid, p.Addr, strings.Join(full, " "))
	return p, nil
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

func (re *realEnv) cleanup() {
	re.mu.Lock()
	procs := re.procs
	re.procs = map[int]*child{}
	re.mu.Unlock()
	for _, ch := range procs {
		stopChild(ch)
	}
}

// load runs "vbcache bench --json" pinned to the load CPU and reads its
// result back.
func (re *realEnv) load(ctx context.Context, cfg Config) (*Result, time.Duration, error) {
	prio := re.cfg.RTPriority
	if re.loadPrio != 0 {
		prio = re.loadPrio
	}
	argv := append(re.prefixAt(re.cfg.LoadCPU, prio), re.vbcache, "bench", "--json", "--no-progress")
	argv = append(argv, cfg.Args()...)
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
