package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/vbcache/vbcache/test/nodeproc"
)

// TestConsoleWithReadOnlyLogins: with --api-readers every read of the
// manager's API needs a login, the console's page and its event stream
// included. In Debian's headless Chromium, a browser that answers the
// login prompt with a reader's login sees the console (its grid filled
// from /ui/events); the reader's login typed into the page cannot change
// the cluster (403, shown in the page's log), the administrator's can (a
// node added from that same page); a browser that cancels the prompt
// gets the API's 401 and no console.
func TestConsoleWithReadOnlyLogins(t *testing.T) {
	chromium := nodeproc.Need(t, "a real browser for the console (package chromium)", "chromium", "chromium-browser")
	readers := filepath.Join(t.TempDir(), "readers.pwdb")
	if err := os.WriteFile(readers, []byte("viewer:viewer-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	nodes := startNodes(t, 2)
	mp := startManager(t, "--replicas", "0", "--failover-after", "0", "--api-readers", readers)
	m := mgr{t: t, url: mp.URL()}
	m.waitLeader()
	m.addNode(nodes[0].Addr)
	m.rebalance(60 * time.Second)
	cr := nodeproc.ClusterCredentials()

	// browser opens /ui in a new headless Chromium whose login prompts
	// are answered by answer; it returns the tab's context and how many
	// prompts it answered.
	browser := func(answer fetch.AuthChallengeResponse) (context.Context, *atomic.Int32) {
		opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium), chromedp.NoSandbox,
			chromedp.WindowSize(1280, 1000), chromedp.UserDataDir(t.TempDir()))
		actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
		t.Cleanup(cancelAlloc)
		ctx, cancel := chromedp.NewContext(actx)
		t.Cleanup(cancel)
		ctx, cancelTime := context.WithTimeout(ctx, 2*time.Minute)
		t.Cleanup(cancelTime)
		prompts := new(atomic.Int32)
		// Every request pauses in the fetch domain: continue it, and
		// answer its login prompt as told.
		paused, authReq := chromedp.Events(ctx, fetch.RequestPaused), chromedp.Events(ctx, fetch.AuthRequired)
		go func() { // owned by ctx: the iteration ends with it
			for ev, err := range paused {
				if err != nil {
					return
				}
				chromedp.Call(ctx, fetch.ContinueRequest, fetch.ContinueRequestParams{RequestID: ev.RequestID})
			}
		}()
		go func() { // owned by ctx, as above
			for ev, err := range authReq {
				if err != nil {
					return
				}
				prompts.Add(1)
				a := answer
				chromedp.Call(ctx, fetch.ContinueWithAuth, fetch.ContinueWithAuthParams{RequestID: ev.RequestID, AuthChallengeResponse: &a})
			}
		}()
		dialogs := chromedp.Events(ctx, page.JavascriptDialogOpening)
		go func() { // owned by ctx: every confirmation is accepted
			for _, err := range dialogs {
				if err != nil {
					return
				}
				chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true})
			}
		}()
		handle := true
		if _, err := chromedp.Call(ctx, fetch.Enable, fetch.EnableParams{HandleAuthRequests: &handle}); err != nil {
			t.Fatalf("enabling the fetch domain: %v", err)
		}
		if err := chromedp.Do(ctx, chromedp.Navigate(m.url+"/ui")); err != nil {
			t.Fatalf("load %s/ui: %v", m.url, err)
		}
		return ctx, prompts
	}
	until := func(ctx context.Context, what, js string, d time.Duration) {
		t.Helper()
		deadline := time.Now().Add(d)
		for {
			if ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](js)); err == nil && ok {
				return
			}
			if time.Now().After(deadline) {
				body, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.innerText`))
				t.Fatalf("%s: not after %v; the page:\n%s", what, d, body)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}

	// A reader.
	ctx, prompts := browser(fetch.AuthChallengeResponse{Response: fetch.AuthChallengeResponseResponseProvideCredentials, Username: "viewer", Password: "viewer-secret"})
	until(ctx, "the reader's console with 1024 cells and its node", fmt.Sprintf(`document.querySelectorAll("#grid div.cell").length === 1024 && !!document.querySelector('#nodes tr[data-node=%q]')`, nodes[0].Addr), 30*time.Second)
	if prompts.Load() == 0 {
		t.Error("the console loaded without a login prompt: reads should need one")
	}
	if err := chromedp.Do(ctx, chromedp.SetValue(chromedp.ID("user"), "viewer"), chromedp.SetValue(chromedp.ID("password"), "viewer-secret"),
		chromedp.SetValue(chromedp.ID("addr"), nodes[1].Addr), chromedp.Click(chromedp.ID("add"))); err != nil {
		t.Fatal(err)
	}
	until(ctx, "the reader's change refused", `document.getElementById("log").innerText.includes(": 403 ")`, 30*time.Second)
	if s := m.status(); len(s.Nodes) != 1 {
		t.Fatalf("a reader's add from the console changed the members: %+v", s.Nodes)
	}
	// The administrator's login typed into the same page.
	if err := chromedp.Do(ctx, chromedp.SetValue(chromedp.ID("user"), cr.User), chromedp.SetValue(chromedp.ID("password"), cr.Password),
		chromedp.Click(chromedp.ID("add"))); err != nil {
		t.Fatal(err)
	}
	until(ctx, "the node added by the administrator, listed", fmt.Sprintf(`!!document.querySelector('#nodes tr[data-node=%q]')`, nodes[1].Addr), 30*time.Second)

	// A browser that cancels the prompt.
	ctx, prompts = browser(fetch.AuthChallengeResponse{Response: fetch.AuthChallengeResponseResponseCancelAuth})
	until(ctx, "the API's 401 instead of the console", `document.body.innerText.includes("needs a login") && !document.getElementById("grid")`, 30*time.Second)
	if prompts.Load() == 0 {
		t.Error("no login prompt for the cancelling browser")
	}
}
