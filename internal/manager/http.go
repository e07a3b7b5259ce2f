package manager

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"time"

	"github.com/vbcache/vbcache/internal/manager/mgrclient"
)

// The HTTP API. Reads are served by any manager from its copy of the
// state; changes go to the leader (a follower proxies them there).
//
//	GET  /pools/default/b/default    the current config JSON (Couchbase's terse bucket config)
//	GET  /pools/default/bs/default   streaming: every new config, each followed by "\n\n\n\n"
//	GET  /status                     leader, members, health, rebalance progress (JSON)
//	GET  /map                        the map as JSON (servers, vBucketMap, forward map)
//	GET  /ui                         the web console (ui/index.html, embedded)
//	GET  /ui/events                  server-sent events for it: status and map, at each change and every second
//	POST /nodes?node=HOST:PORT       add a member
//	DELETE /nodes?node=HOST:PORT     remove a member (the next rebalance moves its vbuckets)
//	POST /rebalance                  start a rebalance
//	POST /rebalance/stop             stop it after the moves in flight
//	POST /failover?node=HOST:PORT[&force=1]  fail a node over (once it surely stopped serving; force: at once)
//
// Errors are JSON {"error": "..."} with a 4xx or 5xx status. mgrclient is
// the client of this API. With --cluster-auth the POSTs and the DELETE
// need the administrator's login (HTTP Basic); the GETs are open unless
// --api-readers names readers.

// The API's documents are defined in mgrclient, which ctl, the proxy
// and the tests use without importing this package (and etcd with it);
// these names are the manager's own for them.
type (
	Status      = mgrclient.Status      // GET /status
	NodeStatus  = mgrclient.NodeStatus  // a node's line in Status
	LeaseStatus = mgrclient.LeaseStatus // the leader's view of a node's lease
)

// Status returns the cluster's status as this manager sees it.
func (m *Manager) Status() Status {
	s := m.State()
	leading, leader := m.Leader()
	st := Status{Leader: leader, This: m.cfg.Advertise, Leading: leading, Rev: s.Rev, NumVBuckets: s.NumVBuckets,
		Replicas: s.Replicas, FailedOver: s.FailedOver, Rebalance: s.Rebalance}
	addrs := append(append([]string{}, s.Servers...), s.Nodes...)
	slices.Sort(addrs)
	addrs = slices.Compact(addrs)
	for _, a := range addrs {
		ns := NodeStatus{Addr: a, Member: slices.Contains(s.Nodes, a)}
		i := slices.Index(s.Servers, a)
		for vb, row := range s.Map {
			for j, x := range row {
				if x == i && i >= 0 {
					if j == 0 {
						ns.Active++
					} else {
						ns.Replica++
					}
				}
			}
			if s.Forward != nil && i >= 0 && s.Forward[vb][0] == i && row[0] != i {
				ns.Incoming++
			}
		}
		m.mu.Lock()
		if r := m.leases[a]; r != nil && leading {
			ls := &LeaseStatus{Grants: r.seq, Answered: r.ackedSeq, Stopped: r.stopped}
			if !r.ackedAt.IsZero() {
				ls.Ago = m.cfg.Clock.Now().Sub(r.ackedAt).Round(time.Millisecond).String()
			}
			if now := m.cfg.Clock.Now(); !r.heldFrom.IsZero() && now.Before(r.heldUntil) {
				ls.Vouched = now.Sub(r.heldFrom).Round(time.Millisecond).String()
			}
			for _, q := range r.quorums {
				ls.Quorums = append(ls.Quorums, q.set)
			}
			ns.Lease = ls
		}
		h := m.health[a]
		if h != nil {
			ns.Probed, ns.Healthy, ns.LastErr = true, h.OK, h.Err
			if !h.OK && !h.DownSince.IsZero() {
				ns.DownFor = time.Since(h.DownSince).Round(time.Second).String()
			}
			if h.restart.known {
				held, active := h.restart.held, h.restart.actives
				ns.Incarnation, ns.Holds, ns.HoldsActive = fmt.Sprintf("%016x", h.restart.incarnation), &held, &active
				ns.Restarted = h.restart.lost()
			}
		}
		m.sampled(&ns)
		m.mu.Unlock()
		st.Nodes = append(st.Nodes, ns)
	}
	return st
}

// Handler returns the HTTP API. A browser's cross-origin request that
// would change state (any method but GET, HEAD and OPTIONS, by its
// Sec-Fetch-Site or Origin header) is refused with 403 before it reaches
// an endpoint (net/http's CrossOriginProtection), so a page an operator
// visits cannot add, remove or fail over nodes through the operator's
// browser. Reads stay open to any origin, and requests from programs
// (ctl, the proxy, curl: no such headers) are not affected.
//
// With Config.Credentials (--cluster-auth), a request that would change
// state must also carry the cluster administrator's login as HTTP Basic
// credentials, or it is answered 401; reads stay open unless
// Config.Readers names read-only logins (see authorize).
func (m *Manager) Handler() http.Handler {
	return http.NewCrossOriginProtection().Handler(m.authorize(m.mux()))
}

// authorize passes reads (GET, HEAD, OPTIONS) to h, and a request that
// changes state only when it carries the administrator's user and
// password (HTTP Basic, compared in constant time; during a rotation the
// previous password too); others get 401 with a
// WWW-Authenticate challenge and change nothing. With Readers, a read
// needs a reader's login or the administrator's (401 otherwise), and a
// reader's change gets 403. A follower checks before it proxies a change
// to the leader, which checks again. Without Credentials naming a user
// (TLS alone, --tls-ca without --cluster-auth, is no login), every
// request passes, as before --cluster-auth existed.
func (m *Manager) authorize(h http.Handler) http.Handler {
	// SetLogins cannot turn the login on or off, so this holds for good.
	if cr := m.credentials(); cr == nil || cr.User == "" {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l := m.logins.Load()
		user, password, ok := r.BasicAuth()
		isAdmin := ok && l.admin.Accepts(user, password)
		isReader := ok && l.readers.Check(user, password)
		readers := l.readers.Len()
		read := r.Method == http.MethodGet || r.Method == http.MethodHead || r.Method == http.MethodOptions
		switch {
		case isAdmin, read && (isReader || readers == 0):
			h.ServeHTTP(w, r)
			return
		case isReader:
			writeJSON(w, http.StatusForbidden, map[string]string{"error": "this request changes the cluster: a read-only login (--api-readers) cannot; it needs the cluster administrator's"})
			return
		}
		w.Header().Set("WWW-Authenticate", `Basic realm="vbcache", charset="UTF-8"`)
		msg := "this request changes the cluster: it needs the cluster administrator's login (HTTP Basic: the user and password of the manager's --cluster-auth file; vbcache ctl --cluster-auth FILE)"
		switch {
		case read:
			msg = "this manager's API needs a login to read it: a read-only user of its --api-readers file, or the cluster administrator's"
		case ok:
			msg = "the cluster administrator's login was refused: wrong user or password"
		}
		writeJSON(w, http.StatusUnauthorized, map[string]string{"error": msg})
	})
}

// mux is the API's endpoints.
func (m *Manager) mux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /pools/default/b/default", func(w http.ResponseWriter, r *http.Request) {
		if len(m.State().Servers) == 0 {
			writeJSON(w, http.StatusNotFound, map[string]string{"error": "the cluster has no node yet: add nodes and rebalance"})
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(m.ConfigJSON())
	})
	mux.HandleFunc("GET /pools/default/bs/default", m.serveStream)
	mux.HandleFunc("GET /ui", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Content-Security-Policy", "default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'")
		w.Write(consoleHTML)
	})
	mux.HandleFunc("GET /ui/events", m.serveConsoleEvents)
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, http.StatusOK, m.Status()) })
	mux.HandleFunc("GET /map", func(w http.ResponseWriter, r *http.Request) {
		s := m.State()
		writeJSON(w, http.StatusOK, mgrclient.Map{Rev: s.Rev, Servers: s.Servers, Map: s.Map, Forward: s.Forward, Replicas: s.Replicas})
	})
	change := func(fn func(ctx context.Context, r *http.Request) (any, error)) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			leading, leader := m.Leader()
			// This manager just won the election and is loading the
			// state: give it a moment rather than refusing.
			for i := 0; !leading && leader == m.cfg.Advertise && i < 100; i++ {
				time.Sleep(20 * time.Millisecond)
				leading, leader = m.Leader()
			}
			if !leading {
				if leader == "" || leader == m.cfg.Advertise {
					writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "no leader yet"})
					return
				}
				u, err := url.Parse(leader)
				if err != nil {
					writeJSON(w, http.StatusBadGateway, map[string]string{"error": err.Error()})
					return
				}
				rp := httputil.NewSingleHostReverseProxy(u)
				rp.Transport = m.cfg.LeaderTransport
				rp.ServeHTTP(w, r)
				return
			}
			res, err := fn(r.Context(), r)
			if err != nil {
				code := http.StatusBadRequest
				if errors.Is(err, ErrNotLeader) {
					code = http.StatusServiceUnavailable
				}
				if errors.Is(err, ErrNotSure) {
					code = http.StatusConflict
				}
				writeJSON(w, code, map[string]string{"error": err.Error()})
				return
			}
			if res == nil {
				res = map[string]string{"result": "ok"}
			}
			writeJSON(w, http.StatusOK, res)
		}
	}
	node := func(r *http.Request) string { return r.URL.Query().Get("node") }
	mux.HandleFunc("POST /nodes", change(func(ctx context.Context, r *http.Request) (any, error) {
		return nil, m.AddNode(ctx, node(r))
	}))
	mux.HandleFunc("DELETE /nodes", change(func(ctx context.Context, r *http.Request) (any, error) {
		return nil, m.RemoveNode(ctx, node(r))
	}))
	mux.HandleFunc("POST /rebalance", change(func(ctx context.Context, r *http.Request) (any, error) {
		return nil, m.StartRebalance(ctx)
	}))
	mux.HandleFunc("POST /rebalance/stop", change(func(ctx context.Context, r *http.Request) (any, error) {
		return nil, m.StopRebalance(ctx)
	}))
	mux.HandleFunc("POST /failover", change(func(_ context.Context, r *http.Request) (any, error) {
		// Not the request's context: a failover outlives a client that
		// hangs up, and ends with the leadership.
		addr, opt := node(r), FailoverOptions{Rebuild: true, Force: r.FormValue("force") != ""}
		type result struct {
			rep FailoverReport
			err error
		}
		res := make(chan result, 1)
		m.inLeadership(func(ctx context.Context) {
			go func() { // owned by this handler, which waits for it
				rep, err := m.FailoverReport(ctx, addr, opt)
				res <- result{rep, err}
			}()
		})
		r2 := <-res
		if r2.err != nil {
			return nil, r2.err
		}
		return r2.rep, nil
	}))
	return mux
}

// serveStream pushes every new config to the client (Couchbase's
// streaming bucket endpoint), until the client goes.
func (m *Manager) serveStream(w http.ResponseWriter, r *http.Request) {
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	ch := make(chan struct{}, 1)
	m.mu.Lock()
	m.subs[ch] = struct{}{}
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		delete(m.subs, ch)
		m.mu.Unlock()
	}()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	fl.Flush() // the client learns at once that the stream is open
	var last int64 = -1
	for {
		// The state is only read (configJSON copies); no config without a node.
		s := m.view()
		if s.Rev != last && len(s.Servers) > 0 {
			last = s.Rev
			b := m.configJSON(s)
			if _, err := w.Write(append(b[:len(b):len(b)], "\n\n\n\n"...)); err != nil {
				return
			}
			fl.Flush()
		}
		select {
		case <-r.Context().Done():
			return
		case <-ch:
		}
	}
}

// consoleHTML is the web console (GET /ui): one page, its script and
// style inline, embedded in the binary. It reads GET /ui/events and sends
// the API's own POSTs, with the login typed into it, so it has the API's
// roles and its cross-origin protection.
//
//go:embed ui/index.html
var consoleHTML []byte

// serveConsoleEvents streams server-sent events for the console: the
// status and the map (GET /status and GET /map) at once, at every change
// of the map and at least once a second (health and rebalance progress
// change without one), until the client goes.
func (m *Manager) serveConsoleEvents(w http.ResponseWriter, r *http.Request) {
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	ch := make(chan struct{}, 1)
	m.mu.Lock()
	m.subs[ch] = struct{}{}
	m.consoles++
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		delete(m.subs, ch)
		m.consoles--
		m.mu.Unlock()
	}()
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		s := m.State()
		b, _ := json.Marshal(struct {
			Status Status        `json:"status"`
			Map    mgrclient.Map `json:"map"`
		}{m.Status(), mgrclient.Map{Rev: s.Rev, Servers: s.Servers, Map: s.Map, Forward: s.Forward, Replicas: s.Replicas}})
		if _, err := fmt.Fprintf(w, "data: %s\n\n", b); err != nil {
			return
		}
		fl.Flush()
		select {
		case <-r.Context().Done():
			return
		case <-ch:
		case <-tick.C:
		}
	}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}
