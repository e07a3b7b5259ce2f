package lifecycle

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vbcache/vbcache/test/nodeproc"
)

// TestLocalMetrics: `vbcache local` prints a Prometheus endpoint for every
// process (its manager and proxy, each node), and each one's output
// passes `promtool check metrics` (Debian's prometheus package). A real
// Prometheus then scrapes them all every 500 ms while the test sends a
// known number of gets through the proxy: the PromQL sum of the nodes'
// memcached_commands_total{command="get"} grows by exactly that number,
// and the proxy's own series by the same. Prometheus runs with the
// configuration local wrote, and every query of the Grafana dashboard in
// docs/grafana answers with data.
func TestLocalMetrics(t *testing.T) {
	promtool := nodeproc.Need(t, "metric checks (package prometheus)", "promtool")
	prom := nodeproc.Need(t, "a real Prometheus server (package prometheus)", "prometheus")
	l := startLocal(t, 2)
	urls := regexp.MustCompile(`http://127\.0\.0\.1:[0-9]+/metrics`).FindAllString(l.stdout.String(), -1)
	if len(urls) != 3 {
		t.Fatalf("want 3 metrics URLs (local's, two nodes'), got %q in\n%s", urls, l.stdout.String())
	}
	get := func(u string) []byte {
		t.Helper()
		resp, err := http.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d %v", u, resp.StatusCode, err)
		}
		return b
	}
	for i, u := range urls {
		body := get(u)
		cmd := exec.Command(promtool, "check", "metrics")
		cmd.Stdin = bytes.NewReader(body)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool check metrics on %s: %v\n%s", u, err, out)
		}
		for _, want := range map[bool][]string{true: {"vbcache_manager_leader 1", "memcached_commands_total{command=\"get\",status=\"hit\"}", "vbcache_proxy_server_requests_total"},
			false: {"memcached_commands_total{command=\"get\",status=\"hit\"}", "vbcache_vbuckets{state=\"active\"}", "memcached_limit_bytes",
				"vbcache_stream_seqnos_behind{peer=", `role="producer",type="replication"}`}}[i == 0] {
			if !bytes.Contains(body, []byte(want)) {
				t.Errorf("%s has no %s", u, want)
			}
		}
	}

	// A real Prometheus scraping every endpoint, with the configuration
	// local printed (its scrape interval shortened for the test).
	m := regexp.MustCompile(`prometheus --config.file=(\S+)`).FindStringSubmatch(l.stdout.String())
	if m == nil {
		t.Fatalf("local printed no Prometheus configuration:\n%s", l.stdout.String())
	}
	generated, err := os.ReadFile(m[1])
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range urls {
		if hp := strings.TrimSuffix(strings.TrimPrefix(u, "http://"), "/metrics"); !bytes.Contains(generated, []byte(strconv.Quote(hp))) {
			t.Errorf("%s does not scrape %s:\n%s", m[1], hp, generated)
		}
	}
	config := strings.Replace(string(generated), "scrape_interval: 5s", "scrape_interval: 500ms\n  scrape_timeout: 400ms", 1)
	dir := t.TempDir()
	port := freeBase(t, 1)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	var promOut nodeproc.Output
	pc := exec.Command(prom, "--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address=127.0.0.1:"+strconv.Itoa(port))
	pc.Stdout, pc.Stderr = &promOut, &promOut
	pc.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := pc.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		pc.Process.Kill()
		pc.Wait()
		if t.Failed() {
			t.Logf("prometheus:\n%s", promOut.String())
		}
	})
	api := "http://127.0.0.1:" + strconv.Itoa(port)
	// query returns the single value of an instant PromQL query, or
	// ok=false while it has none.
	query := func(q string) (float64, bool) {
		resp, err := http.Get(api + "/api/v1/query?query=" + url.QueryEscape(q))
		if err != nil {
			return 0, false
		}
		defer resp.Body.Close()
		var r struct {
			Status string
			Data   struct {
				Result []struct {
					Value [2]any
				}
			}
		}
		if json.NewDecoder(resp.Body).Decode(&r) != nil || r.Status != "success" || len(r.Data.Result) != 1 {
			return 0, false
		}
		s, _ := r.Data.Result[0].Value[1].(string)
		v, err := strconv.ParseFloat(s, 64)
		return v, err == nil
	}
	const nodesGets = `sum(memcached_commands_total{job="nodes",command="get"})`
	const proxyGets = `sum(memcached_commands_total{job="vbcache",command="get"})`
	up := func() bool { v, ok := query(`sum(up)`); return ok && v == 3 }
	l.wait("Prometheus to scrape all three endpoints", 60*time.Second, up)

	// The counts before (nothing else sends gets).
	var before, proxyBefore float64
	l.wait("the get counts in Prometheus", 30*time.Second, func() bool {
		var ok1, ok2 bool
		before, ok1 = query(nodesGets)
		proxyBefore, ok2 = query(proxyGets)
		return ok1 && ok2
	})
	const gets = 500
	c := dialText(t, l.proxyAddr())
	c.do(t, "set metrics-key 0 0 1\r\nv\r\n")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := 0; i < gets && ctx.Err() == nil; i++ {
		if line := c.do(t, "get metrics-key\r\n"); line != "VALUE metrics-key 0 1" {
			t.Fatalf("get %d through the proxy: %q", i, line)
		}
	}
	l.wait(fmt.Sprintf("Prometheus to see the %d gets", gets), 30*time.Second, func() bool {
		v, ok := query(nodesGets)
		return ok && v >= before+gets
	})
	// Once more from scrapes that all began after the gets: exactly the
	// gets sent, no more.
	done := float64(time.Now().UnixMilli()) / 1000
	l.wait("a scrape of every endpoint after the gets", 30*time.Second, func() bool {
		v, ok := query(`min(timestamp(up))`)
		return ok && v > done
	})
	after, _ := query(nodesGets)
	proxyAfter, _ := query(proxyGets)
	t.Logf("PromQL %s: %v before, %v after %d gets; the proxy's: %v → %v", nodesGets, before, after, gets, proxyBefore, proxyAfter)
	if after-before != gets {
		t.Errorf("the nodes' get count in Prometheus grew by %v, want %d", after-before, gets)
	}
	if proxyAfter-proxyBefore != gets {
		t.Errorf("the proxy's get count in Prometheus grew by %v, want %d", proxyAfter-proxyBefore, gets)
	}
	if r, ok := query(`sum(rate(memcached_commands_total{job="nodes",command="get"}[5s]))`); !ok || r <= 0 {
		t.Errorf("rate of the nodes' gets: %v %v, want > 0", r, ok)
	}

	// Every query of the Grafana dashboard in docs/ parses and has data.
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	b, err := os.ReadFile("../../docs/grafana/vbcache.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("docs/grafana/vbcache.json: %v", err)
	}
	queries := 0
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			queries++
			resp, err := http.Get(api + "/api/v1/query?query=" + url.QueryEscape(tg.Expr))
			if err != nil {
				t.Fatal(err)
			}
			var r struct {
				Status, Error string
				Data          struct{ Result []json.RawMessage }
			}
			err = json.NewDecoder(resp.Body).Decode(&r)
			resp.Body.Close()
			if err != nil || r.Status != "success" || len(r.Data.Result) == 0 {
				t.Errorf("dashboard panel %q: %s: status %q %s, %d series (%v)", p.Title, tg.Expr, r.Status, r.Error, len(r.Data.Result), err)
			}
		}
	}
	if queries < 10 {
		t.Errorf("the dashboard has %d queries", queries)
	}
}

// proxyAddr is the address of local's proxy (its base port).
func (l *localRun) proxyAddr() string { return "127.0.0.1:" + strconv.Itoa(l.base) }

// metricsURL is the i-th metrics URL local printed: the manager's and
// proxy's first, then the nodes'.
func (l *localRun) metricsURL(i int) string {
	l.t.Helper()
	urls := regexp.MustCompile(`http://127\.0\.0\.1:[0-9]+/metrics`).FindAllString(l.stdout.String(), -1)
	if i >= len(urls) {
		l.t.Fatalf("local printed %d metrics URLs, no %d-th:\n%s", len(urls), i, l.stdout.String())
	}
	return urls[i]
}

// scrape returns the value of one series of the metrics at u, written as
// in the exposition format (name{labels in their order}), or fails.
func scrape(t *testing.T, u, series string) float64 {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %q: %v", u, line, err)
			}
			return f
		}
	}
	t.Fatalf("%s has no %s", u, series)
	return 0
}

// getJSON decodes the JSON answer of a GET of u into v, or fails.
func getJSON(t *testing.T, u string, v any) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", u, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
}
