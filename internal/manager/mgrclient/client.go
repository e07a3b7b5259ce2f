// Package mgrclient is a client of the cluster manager's HTTP API
// (internal/manager, http.go), and the home of the documents that API
// answers with (Status, Rebalance, Map). "vbcache ctl", the proxy and the
// tests use it to drive and follow a manager without importing the
// manager, and etcd with it; the manager's handlers write these same
// types.
//
// Data flow: each method is one HTTP request to Client.Base, synchronous,
// bounded by its context and by the http.Client's Timeout. A change
// (AddNode, RemoveNode, StartRebalance, StopRebalance, Failover) may be
// sent to any manager: a follower passes it on to the leader. Reads
// (Status, Map, Config) are answered from the copy of the state of the
// manager asked. StreamConfigs opens the streaming config endpoint and
// returns a ConfigStream that its caller reads and closes; nothing here
// starts a goroutine.
//
// Errors: their texts are what "vbcache ctl" prints after its own prefix,
// so they are part of its interface. A request that gets no answer fails
// with "manager BASE: " and the *url.Error (which names the method and
// the URL). An answer outside 2xx is a *StatusError, whose text is the
// manager's own explanation ({"error": "..."}) or else "manager answered
// STATUS: BODY". An answer that is not the JSON expected gives
// encoding/json's error as it is. Answers, and each config of a stream,
// are read whole, up to 64 MiB (a config of 65536 vbuckets is about 1 MB).
package mgrclient

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// maxBody bounds an answer (and one config of a stream).
const maxBody = 64 << 20

// Client talks to one manager. The zero value is not usable: Base is
// required. A Client may be used by several goroutines at once.
type Client struct {
	// Base is the manager's URL, such as "http://127.0.0.1:11212"; a
	// trailing slash is ignored.
	Base string
	// HTTP sends the requests; nil means http.DefaultClient. Its
	// Timeout, if any, bounds every request, a stream's included.
	HTTP *http.Client
	// User and Password, when User is set, are sent with every request
	// as HTTP Basic credentials: the cluster administrator's login, which
	// a manager run with --cluster-auth requires for every change.
	User, Password string
}

// StatusError is an answer outside 2xx.
type StatusError struct {
	URL    string // the request's URL
	Status string // the HTTP status, such as "404 Not Found"
	// Message is the manager's explanation (the answer's
	// {"error": "..."}), or "" when the answer carried none; Body is
	// then the answer, without surrounding blanks.
	Message string
	Body    string
}

func (e *StatusError) Error() string {
	if e.Message != "" {
		return e.Message
	}
	return fmt.Sprintf("manager answered %s: %s", e.Status, e.Body)
}

// Status is GET /status.
func (c *Client) Status(ctx context.Context) (Status, error) {
	var s Status
	err := c.call(ctx, "GET", "/status", nil, &s)
	return s, err
}

// Map is GET /map.
func (c *Client) Map(ctx context.Context) (Map, error) {
	var m Map
	err := c.call(ctx, "GET", "/map", nil, &m)
	return m, err
}

// Config is GET /pools/default/b/default: the cluster config JSON
// (internal/vbmap's format) that nodes and clients get, as the manager
// sent it. A manager whose cluster has no node yet answers 404.
func (c *Client) Config(ctx context.Context) ([]byte, error) {
	return c.do(ctx, "GET", "/pools/default/b/default", nil)
}

// AddNode is POST /nodes?node=addr: addr, a node running in cluster mode
// (HOST:PORT), becomes a member; a rebalance gives it vbuckets.
func (c *Client) AddNode(ctx context.Context, addr string) error {
	return c.call(ctx, "POST", "/nodes", url.Values{"node": {addr}}, nil)
}

// RemoveNode is DELETE /nodes?node=addr: addr stops being a member; a
// rebalance moves its vbuckets away.
func (c *Client) RemoveNode(ctx context.Context, addr string) error {
	return c.call(ctx, "DELETE", "/nodes", url.Values{"node": {addr}}, nil)
}

// StartRebalance is POST /rebalance. It returns once the rebalance has
// started; Status shows its progress.
func (c *Client) StartRebalance(ctx context.Context) error {
	return c.call(ctx, "POST", "/rebalance", nil, nil)
}

// StopRebalance is POST /rebalance/stop: the rebalance stops after the
// moves in flight.
func (c *Client) StopRebalance(ctx context.Context) error {
	return c.call(ctx, "POST", "/rebalance/stop", nil, nil)
}

// Failover is POST /failover?node=addr[&force=1]: addr's replicas are
// promoted once it surely stopped serving (its lease ran out), or at once
// with force, the map is published and replicas are rebuilt. It returns
// when the failover is done.
func (c *Client) Failover(ctx context.Context, addr string, force bool) error {
	_, err := c.FailoverReport(ctx, addr, force)
	return err
}

// FailoverReport is what a failover did (the manager's FailoverReport):
// how many vbuckets were promoted, lost (no replica: active, empty,
// elsewhere) and not activated, how many replica copies left the map,
// how many vbuckets moving into it were made active again on their
// sources, and, for each vbucket whose live replicas differed, which one
// was promoted and why.
type FailoverReport struct {
	Node        string `json:"node"`
	Promoted    int    `json:"promoted"`
	Lost        int    `json:"lost"`
	Replicas    int    `json:"replicas"`
	Unactivated int    `json:"unactivated"`
	Reactivated int    `json:"reactivated"`
	Choices     []struct {
		VBucket  int    `json:"vbucket"`
		Promoted string `json:"promoted"`
		Why      string `json:"why"`
	} `json:"choices"`
}

// FailoverReport is Failover, with the manager's report of it.
func (c *Client) FailoverReport(ctx context.Context, addr string, force bool) (*FailoverReport, error) {
	q := url.Values{"node": {addr}}
	if force {
		q.Set("force", "1")
	}
	var rep FailoverReport
	if err := c.call(ctx, "POST", "/failover", q, &rep); err != nil {
		return nil, err
	}
	return &rep, nil
}

// call sends a request and decodes its JSON answer into out, when out is
// not nil.
func (c *Client) call(ctx context.Context, method, path string, q url.Values, out any) error {
	body, err := c.do(ctx, method, path, q)
	if err != nil {
		return err
	}
	if out != nil {
		return json.Unmarshal(body, out)
	}
	return nil
}

// do sends a request and returns the body of a 2xx answer.
func (c *Client) do(ctx context.Context, method, path string, q url.Values) ([]byte, error) {
	u := c.url(path, q)
	resp, err := c.send(ctx, method, u)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := c.read(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		return nil, statusError(u, resp.Status, body)
	}
	return body, nil
}

// url is the URL of path with the query q.
func (c *Client) url(path string, q url.Values) string {
	u := strings.TrimRight(c.Base, "/") + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	return u
}

// send sends a request to u and returns the answer, whatever its status.
func (c *Client) send(ctx context.Context, method, u string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, u, nil)
	if err != nil {
		return nil, err
	}
	if c.User != "" {
		req.SetBasicAuth(c.User, c.Password)
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("manager %s: %w", c.Base, err)
	}
	return resp, nil
}

// read reads a whole answer of at most maxBody bytes.
func (c *Client) read(r io.Reader) ([]byte, error) {
	body, err := io.ReadAll(io.LimitReader(r, maxBody+1))
	if err != nil {
		return nil, err
	}
	if len(body) > maxBody {
		return nil, fmt.Errorf("manager %s: answer larger than %d bytes", c.Base, maxBody)
	}
	return body, nil
}

// statusError describes an answer outside 2xx to a request for u.
func statusError(u, status string, body []byte) error {
	e := &StatusError{URL: u, Status: status}
	var msg struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(body, &msg) == nil && msg.Error != "" {
		e.Message = msg.Error
	} else {
		e.Body = string(bytes.TrimSpace(body))
	}
	return e
}
