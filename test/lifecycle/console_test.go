package lifecycle

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/vbcache/vbcache/internal/manager/mgrclient"
	"github.com/vbcache/vbcache/test/nodeproc"
)

// TestConsoleInBrowser drives the manager's web console (/ui) of a
// `vbcache local` cluster in a real browser, Debian's headless Chromium
// through chromedp: the grid has a cell per vbucket (1024); with the
// administrator's login typed in, adding a node and starting a rebalance
// (each behind a confirmation) brings the progress to 100% and gives the
// new node cells of the grid; a node killed and failed over from the
// console turns red. Screenshots go to $VBCACHE_ARTIFACTS (or the test's
// temporary directory).
func TestConsoleInBrowser(t *testing.T) {
	chromium := nodeproc.Need(t, "a real browser for the console (package chromium)", "chromium", "chromium-browser")
	l := startLocal(t, 2)
	cr := l.creds()
	newNode := nodeproc.Start(t, nodeproc.Vbcache, bin, "--vbuckets", "1024", "--cluster-auth", filepath.Join(l.dir, "admin.pwdb"))

	shots := os.Getenv("VBCACHE_ARTIFACTS")
	if shots == "" {
		shots = t.TempDir()
	} else if err := os.MkdirAll(shots, 0o755); err != nil {
		t.Fatal(err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium), chromedp.NoSandbox,
		chromedp.WindowSize(1280, 1000), chromedp.UserDataDir(t.TempDir()))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	ctx, cancelTime := context.WithTimeout(ctx, 5*time.Minute)
	defer cancelTime()
	// Every confirmation the console asks for is accepted.
	dialogs := chromedp.Events(ctx, page.JavascriptDialogOpening)
	go func() { // owned by ctx: the iteration ends with it
		for _, err := range dialogs {
			if err != nil {
				return
			}
			chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true})
		}
	}()
	run := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, steps...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	// until evaluates js (a boolean expression) every 100 ms until it is
	// true, for at most d.
	until := func(what, js string, d time.Duration) {
		t.Helper()
		deadline := time.Now().Add(d)
		for {
			if ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](js)); err == nil && ok {
				return
			}
			if time.Now().After(deadline) {
				log, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("log").innerText`))
				t.Fatalf("%s: not after %v (console log:\n%s)", what, d, log)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	shot := func(name string) {
		t.Helper()
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // quality 100: PNG
		if err != nil {
			t.Fatalf("screenshot %s: %v", name, err)
		}
		p := filepath.Join(shots, name)
		if err := os.WriteFile(p, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot: %s", p)
	}

	ui := fmt.Sprintf("http://127.0.0.1:%d/ui", l.base+1)
	run("load "+ui, chromedp.Navigate(ui))
	until("1024 cells", `document.querySelectorAll("#grid div.cell").length === 1024`, 30*time.Second)
	until("the two nodes listed", `document.querySelectorAll("#nodes tbody tr").length === 2`, 30*time.Second)

	run("log in and add a node", chromedp.SetValue(chromedp.ID("user"), cr.User), chromedp.SetValue(chromedp.ID("password"), cr.Password),
		chromedp.SetValue(chromedp.ID("addr"), newNode.Addr), chromedp.Click(chromedp.ID("add")))
	until("the new node listed", fmt.Sprintf(`!!document.querySelector('#nodes tr[data-node=%q]')`, newNode.Addr), 30*time.Second)
	run("start a rebalance", chromedp.Click(chromedp.ID("rebalance")))
	// One condition: right after the click the page may still show the
	// first rebalance at 100%; this one is done when the new node also
	// has its share of the grid.
	until("the rebalance at 100% with the new node's cells", fmt.Sprintf(`document.getElementById("progress").value === 100 && document.getElementById("pct").textContent.includes("done") && `+
		`[...document.querySelectorAll("#grid div.cell")].filter(d => d.dataset.active === %q).length > 300`, newNode.Addr), 150*time.Second)
	shot("console-after-rebalance.png")

	// Each node's ops/s and replication lag, sampled while the console
	// watches: ops/s above 0 on some node while gets go through the
	// proxy, 0 on every node once they stop; a lag figure for each.
	c := dialText(t, l.proxyAddr())
	c.do(t, "set console-key 0 0 1\r\nv\r\n")
	const opsShown = `[...document.querySelectorAll("#nodes td.ops")].map(td => Number(td.textContent.replace(/,/g, "")))`
	busy := false
	for deadline := time.Now().Add(60 * time.Second); !busy; {
		for range 200 { // a bounded burst, then a look
			if line := c.do(t, "get console-key\r\n"); line != "VALUE console-key 0 1" {
				t.Fatalf("get through the proxy: %q", line)
			}
		}
		busy, _ = chromedp.Run(ctx, chromedp.Evaluate[bool](opsShown+`.some(v => v > 0) && [...document.querySelectorAll("#nodes td.lag")].length === 3 && [...document.querySelectorAll("#nodes td.lag")].every(td => /^[0-9,]+ \(/.test(td.textContent))`))
		if !busy && time.Now().After(deadline) {
			rows, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("nodes").innerText`))
			t.Fatalf("no ops/s above 0 and lag on every node after 60 s of gets:\n%s", rows)
		}
	}
	shot("console-under-load.png")
	c.close()
	until("ops/s back to 0 on every node", opsShown+`.every(v => v === 0)`, 30*time.Second)

	// The manager's metrics saw each move and its takeover.
	var st mgrclient.Status
	getJSON(t, fmt.Sprintf("http://127.0.0.1:%d/status", l.base+1), &st)
	if st.Rebalance == nil || st.Rebalance.Done == 0 {
		t.Fatalf("status after the rebalance: %+v", st.Rebalance)
	}
	mu := l.metricsURL(0)
	if n := scrape(t, mu, `vbcache_manager_move_duration_seconds_count{result="moved"}`); n != float64(st.Rebalance.Done) {
		t.Errorf("vbucket moves in the histogram: %v, the rebalance moved %d", n, st.Rebalance.Done)
	}
	if n := scrape(t, mu, `vbcache_manager_takeover_duration_seconds_count`); n < 1 || n > float64(st.Rebalance.Done)+scrape(t, mu, `vbcache_manager_move_duration_seconds_count{result="failed"}`) {
		t.Errorf("takeovers in the histogram: %v, for %d moves", n, st.Rebalance.Done)
	}

	victim := l.addr(0)
	if err := syscall.Kill(l.nodePid(0), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	run("fail the killed node over", chromedp.Click(chromedp.CSS(fmt.Sprintf(`#nodes tr[data-node=%q] button.failover`, victim))))
	until("the failed-over node red", fmt.Sprintf(`(() => { const tr = document.querySelector('#nodes tr[data-node=%q]'); return tr && tr.className === "down" && tr.innerText.includes("failed over") })()`, victim), 60*time.Second)
	until("no cell active on it", fmt.Sprintf(`[...document.querySelectorAll("#grid div.cell")].every(d => d.dataset.active !== %q)`, victim), 60*time.Second)
	shot("console-after-failover.png")
	// The page shows the failover once its map is committed; the
	// failover (and its count) ends after the promotions.
	l.wait("the failover counted", 30*time.Second, func() bool {
		return scrape(t, mu, `vbcache_manager_failovers_total{result="done",trigger="api"}`) == 1
	})
	if n := scrape(t, mu, `vbcache_manager_failovers_total{result="done",trigger="automatic"}`) + scrape(t, mu, `vbcache_manager_failovers_total{result="failed",trigger="api"}`); n != 0 {
		t.Errorf("%v other failovers counted, want none", n)
	}

}
