package mgrclient

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
)

// TestRequests pins each method's request: method, path and query.
func TestRequests(t *testing.T) {
	var mu sync.Mutex // protects got
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Method+" "+r.URL.RequestURI())
		mu.Unlock()
		switch r.URL.Path {
		case "/status":
			w.Write([]byte(`{"leader":"http://m1","rev":7,"nodes":[{"addr":"a:1","active":3}],"rebalance":{"running":true,"done":2,"error":"x"}}`))
		case "/map":
			w.Write([]byte(`{"rev":3,"servers":["a:1","b:1"],"vBucketMap":[[0,1],[1,0]],"vBucketMapForward":null,"replicas":1}`))
		case "/pools/default/b/default":
			w.Write([]byte(`{"rev":3}`))
		default:
			w.Write([]byte(`{"result":"ok"}`))
		}
	}))
	defer srv.Close()
	c := &Client{Base: srv.URL + "/"} // the trailing slash is ignored
	ctx := context.Background()

	s, err := c.Status(ctx)
	if err != nil || s.Leader != "http://m1" || s.Rev != 7 || len(s.Nodes) != 1 || s.Nodes[0].Active != 3 ||
		s.Rebalance == nil || !s.Rebalance.Running || s.Rebalance.Done != 2 || s.Rebalance.Err != "x" {
		t.Errorf("Status: %+v %v", s, err)
	}
	m, err := c.Map(ctx)
	if err != nil || m.Rev != 3 || len(m.Servers) != 2 || len(m.Map) != 2 || m.Map[1][0] != 1 || m.Forward != nil || m.Replicas != 1 {
		t.Errorf("Map: %+v %v", m, err)
	}
	if b, err := c.Config(ctx); err != nil || string(b) != `{"rev":3}` {
		t.Errorf("Config: %q %v", b, err)
	}
	for _, err := range []error{
		c.AddNode(ctx, "a:1"),
		c.RemoveNode(ctx, "b:2"),
		c.StartRebalance(ctx),
		c.StopRebalance(ctx),
		c.Failover(ctx, "c:3", false),
		c.Failover(ctx, "c:3", true),
	} {
		if err != nil {
			t.Error(err)
		}
	}
	want := []string{
		"GET /status",
		"GET /map",
		"GET /pools/default/b/default",
		"POST /nodes?node=a%3A1",
		"DELETE /nodes?node=b%3A2",
		"POST /rebalance",
		"POST /rebalance/stop",
		"POST /failover?node=c%3A3",
		"POST /failover?force=1&node=c%3A3",
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("requests:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestMapJSON: Map's fields are in the order of their JSON names, so
// encoding one gives the keys in the order encoding a map gives them.
func TestMapJSON(t *testing.T) {
	m := Map{Rev: 3, Servers: []string{"a:1"}, Map: [][]int{{0}}, Replicas: 0}
	b1, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	b2, err := json.Marshal(map[string]any{"rev": m.Rev, "servers": m.Servers, "vBucketMap": m.Map,
		"vBucketMapForward": m.Forward, "replicas": m.Replicas})
	if err != nil {
		t.Fatal(err)
	}
	if string(b1) != string(b2) {
		t.Errorf("Map encodes as\n%s\nnot\n%s", b1, b2)
	}
}

// TestErrors pins the error texts, which "vbcache ctl" prints.
func TestErrors(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/status": // the manager's explanation
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte("{\n  \"error\": \"no leader yet\"\n}\n"))
		case "/map": // none
			http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		case "/pools/default/b/default": // not JSON
			w.Write([]byte("<html>"))
		}
	}))
	defer srv.Close()
	ctx := context.Background()
	c := &Client{Base: srv.URL}

	_, err := c.Status(ctx)
	var se *StatusError
	if !errors.As(err, &se) || err.Error() != "no leader yet" || se.Status != "503 Service Unavailable" ||
		se.URL != srv.URL+"/status" {
		t.Errorf("error answer: %#v", err)
	}
	_, err = c.Map(ctx)
	if err == nil || err.Error() != "manager answered 500 Internal Server Error: streaming unsupported" {
		t.Errorf("error answer without a message: %v", err)
	}
	if b, err := c.Config(ctx); err != nil || string(b) != "<html>" {
		t.Errorf("Config returns the body as it is: %q %v", b, err)
	}
	srv.Close()
	_, err = c.Status(ctx)
	var ue *url.Error
	if err == nil || !strings.HasPrefix(err.Error(), "manager "+srv.URL+": Get \""+srv.URL+"/status\": ") || !errors.As(err, &ue) {
		t.Errorf("no manager: %v", err)
	}
}

// TestDecodeError: an answer that is not the JSON expected is
// encoding/json's error.
func TestDecodeError(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("<html>"))
	}))
	defer srv.Close()
	_, err := (&Client{Base: srv.URL}).Status(context.Background())
	var se *json.SyntaxError
	if !errors.As(err, &se) {
		t.Errorf("got %v", err)
	}
}

// TestStreamConfigs reads configs as the manager streams them: each
// followed by four newlines, the first one sent only after the stream
// opened.
func TestStreamConfigs(t *testing.T) {
	send := make(chan string)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/pools/default/bs/default" {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		for s := range send {
			w.Write([]byte(s))
			w.(http.Flusher).Flush()
		}
	}))
	defer srv.Close()
	s, err := (&Client{Base: srv.URL}).StreamConfigs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	go func() { // owned by the test: ends when send is closed
		send <- `{"rev":1}` + "\n\n\n\n"
		send <- `{"rev":2}` + "\n\n\n\n" + "\n\n\n\n" + `{"rev"` // an empty one, and one in two writes
		send <- `:3}` + "\n\n\n\n"
		close(send)
	}()
	for _, want := range []string{`{"rev":1}`, `{"rev":2}`, `{"rev":3}`} {
		b, err := s.Next()
		if err != nil || string(b) != want {
			t.Fatalf("Next: %q %v, want %s", b, err, want)
		}
	}
	if b, err := s.Next(); err != io.ErrUnexpectedEOF {
		t.Errorf("after the end: %q %v", b, err)
	}
}

// TestStreamConfigsRefused: a stream the manager refuses is a
// StatusError.
func TestStreamConfigsRefused(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	defer srv.Close()
	_, err := (&Client{Base: srv.URL}).StreamConfigs(context.Background())
	var se *StatusError
	if !errors.As(err, &se) || se.Status != "404 Not Found" || err.Error() != "manager answered 404 Not Found: 404 page not found" {
		t.Errorf("got %v", err)
	}
}
