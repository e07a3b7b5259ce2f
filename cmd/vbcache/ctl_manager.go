package main

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/vbcache/vbcache/internal/manager/mgrclient"
)

// The manager's subcommands of "vbcache ctl": they talk to a manager's
// HTTP API through internal/manager/mgrclient, the manager found with
// --manager URL or the VBCACHE_MANAGER environment variable. Each parses
// its flags, makes one request (rebalance --wait then polls the status)
// and prints the answer.

func init() {
	cmds := []ctlCommand{
		{"status", "[--manager URL]", "the cluster: leader, members, health, vbuckets per node, rebalance", ctlStatus},
		{"add-node", "[--manager URL] [--cluster-auth FILE] HOST:PORT", "make a running node a member (a rebalance gives it vbuckets)", ctlAddNode},
		{"remove-node", "[--manager URL] [--cluster-auth FILE] HOST:PORT", "take a node out of the members (a rebalance moves its vbuckets away)", ctlRemoveNode},
		{"rebalance", "[--manager URL] [--cluster-auth FILE] [--wait]", "move vbuckets to the planned map of the members, with a progress bar", ctlRebalance},
		{"stop-rebalance", "[--manager URL] [--cluster-auth FILE]", "stop the rebalance after the moves in flight (the map stays valid)", ctlStopRebalance},
		{"failover", "[--manager URL] [--cluster-auth FILE] [--force] HOST:PORT", "take a node out now: promote its replicas, publish the map, rebuild replicas", ctlFailover},
		{"map", "[--manager URL] [--json]", "print the vbucket map", ctlMap},
	}
	// Before "help", which stays last.
	n := len(ctlCommands)
	ctlCommands = append(ctlCommands[:n-1:n-1], append(cmds, ctlCommands[n-1])...)
}

// ctlManagerDefault is a --manager given before the subcommand.
var ctlManagerDefault string

// ctlManagerFlags are the flags every manager subcommand takes.
type ctlManagerFlags struct {
	url  *string          // --manager
	auth clusterAuthFlags // --cluster-auth: the administrator, whom a change needs
}

// ctlManagerOpts adds --manager and --cluster-auth to fs.
func ctlManagerOpts(fs *flag.FlagSet) ctlManagerFlags {
	def := ctlManagerDefault
	if def == "" {
		def = os.Getenv("VBCACHE_MANAGER")
	}
	if def == "" {
		def = "http://127.0.0.1:11212"
	}
	return ctlManagerFlags{url: fs.String("manager", def, "the manager's URL (or VBCACHE_MANAGER)"), auth: ctlAuthFlag(fs)}
}

// client is the client of the manager at --manager, logged in with
// --cluster-auth's credentials when given; each request may take a
// minute.
func (f ctlManagerFlags) client() (*mgrclient.Client, error) {
	mc := &mgrclient.Client{Base: *f.url, HTTP: &http.Client{Timeout: 60 * time.Second}}
	cr, err := f.auth.credentials()
	if err != nil {
		return nil, err
	}
	if cr != nil && cr.TLS != nil {
		// A manager serving its API over HTTPS (--api-tls-cert) is
		// verified against the cluster's CA, as nodes are.
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.TLSClientConfig = cr.TLS
		mc.HTTP.Transport = tr
	}
	if cr != nil {
		mc.User, mc.Password = cr.User, cr.Password
	}
	return mc, nil
}

// ctlManagerErr prints a manager subcommand's failure, with a hint when
// the manager wanted the administrator's login.
func ctlManagerErr(stderr io.Writer, name string, err error) int {
	fmt.Fprintf(stderr, "vbcache ctl %s: %v\n", name, err)
	var se *mgrclient.StatusError
	if errors.As(err, &se) && strings.HasPrefix(se.Status, "401") {
		fmt.Fprintf(stderr, "vbcache ctl %s: give --cluster-auth FILE (or set VBCACHE_CLUSTER_AUTH) with the user:password file the manager's --cluster-auth names\n", name)
	}
	var ua x509.UnknownAuthorityError
	if errors.As(err, &ua) {
		fmt.Fprintf(stderr, "vbcache ctl %s: the manager's HTTPS certificate is not signed by a CA ctl trusts: give --tls-ca FILE (or set VBCACHE_TLS_CA) with the cluster's CA\n", name)
	}
	return 1
}

// ctlOneNode parses "[--manager URL] HOST:PORT".
func ctlOneNode(name, usage string, args []string, stderr io.Writer) (mu ctlManagerFlags, node string, status int, done bool) {
	fs := ctlFlags(name, usage, stderr)
	mu = ctlManagerOpts(fs)
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return mu, "", 0, true
		}
		return mu, "", 2, true
	}
	if fs.NArg() != 1 {
		return mu, "", ctlUsageErr(stderr, fs, "want one HOST:PORT"), true
	}
	if err := ctlAddr("node", fs.Arg(0)); err != nil {
		return mu, "", ctlUsageErr(stderr, fs, "%v", err), true
	}
	return mu, fs.Arg(0), 0, false
}

func ctlAddNode(args []string, stdout, stderr io.Writer) int {
	return ctlMembership("add-node", (*mgrclient.Client).AddNode,
		"%s is a member; \"vbcache ctl rebalance\" gives it vbuckets\n", args, stdout, stderr)
}

func ctlRemoveNode(args []string, stdout, stderr io.Writer) int {
	return ctlMembership("remove-node", (*mgrclient.Client).RemoveNode,
		"%s is no longer a member; \"vbcache ctl rebalance\" moves its vbuckets away\n", args, stdout, stderr)
}

// ctlMembership is add-node or remove-node: change, then done (a format
// for the node) on stdout.
func ctlMembership(name string, change func(*mgrclient.Client, context.Context, string) error, done string,
	args []string, stdout, stderr io.Writer) int {
	mu, node, st, exit := ctlOneNode(name, "[--manager URL] [--cluster-auth FILE] HOST:PORT", args, stderr)
	if exit {
		return st
	}
	mc, err := mu.client()
	if err != nil {
		return ctlManagerErr(stderr, name, err)
	}
	if err := change(mc, context.Background(), node); err != nil {
		return ctlManagerErr(stderr, name, err)
	}
	fmt.Fprintf(stdout, done, node)
	return 0
}

func ctlFailover(args []string, stdout, stderr io.Writer) int {
	fs := ctlFlags("failover", "[--manager URL] [--cluster-auth FILE] [--force] HOST:PORT", stderr)
	mu := ctlManagerOpts(fs)
	force := fs.Bool("force", false, "promote its replicas at once, without waiting to be sure it stopped serving (for a node known to be gone)")
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	if fs.NArg() != 1 {
		return ctlUsageErr(stderr, fs, "want one HOST:PORT")
	}
	node := fs.Arg(0)
	if err := ctlAddr("node", node); err != nil {
		return ctlUsageErr(stderr, fs, "%v", err)
	}
	mc, err := mu.client()
	if err != nil {
		return ctlManagerErr(stderr, "failover", err)
	}
	rep, err := mc.FailoverReport(context.Background(), node, *force)
	if err != nil {
		return ctlManagerErr(stderr, "failover", err)
	}
	fmt.Fprintf(stdout, "%s failed over: its replicas are active, the map is published, replicas are being rebuilt\n", node)
	fmt.Fprintf(stdout, "%d vbuckets promoted, %d lost (no replica: active, empty, elsewhere), %d replica copies dropped", rep.Promoted, rep.Lost, rep.Replicas)
	if rep.Reactivated > 0 {
		fmt.Fprintf(stdout, ", %d moving into it active again on their sources", rep.Reactivated)
	}
	if rep.Unactivated > 0 {
		fmt.Fprintf(stdout, ", %d NOT activated (see the manager's log)", rep.Unactivated)
	}
	fmt.Fprintln(stdout)
	for _, c := range rep.Choices {
		fmt.Fprintf(stdout, "vbucket %d: promoted %s: %s\n", c.VBucket, c.Promoted, c.Why)
	}
	return 0
}

func ctlStopRebalance(args []string, stdout, stderr io.Writer) int {
	fs := ctlFlags("stop-rebalance", "[--manager URL] [--cluster-auth FILE]", stderr)
	mu := ctlManagerOpts(fs)
	if st, done := parseCtl(fs, args, stderr); done {
		return st
	}
	mc, err := mu.client()
	if err != nil {
		return ctlManagerErr(stderr, "stop-rebalance", err)
	}
	if err := mc.StopRebalance(context.Background()); err != nil {
		return ctlManagerErr(stderr, "stop-rebalance", err)
	}
	fmt.Fprintln(stdout, "the rebalance stops after the moves in flight")
	return 0
}

func ctlStatus(args []string, stdout, stderr io.Writer) int {
	fs := ctlFlags("status", "[--manager URL]", stderr)
	mu := ctlManagerOpts(fs)
	if st, done := parseCtl(fs, args, stderr); done {
		return st
	}
	mc, err := mu.client()
	if err != nil {
		return ctlManagerErr(stderr, "status", err)
	}
	s, err := mc.Status(context.Background())
	if err != nil {
		return ctlManagerErr(stderr, "status", err)
	}
	fmt.Fprintf(stdout, "leader %s   rev %d   %d vbuckets   %d replica(s)\n\n", s.Leader, s.Rev, s.NumVBuckets, s.Replicas)
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tMEMBER\tHEALTH\tACTIVE\tREPLICA\tNOTE")
	for _, n := range s.Nodes {
		health := "up"
		switch {
		case !n.Probed:
			health = "?"
		case !n.Healthy:
			health = "down " + n.DownFor
		}
		note := ""
		if n.Incoming > 0 {
			note = fmt.Sprintf("+%d active after rebalance", n.Incoming)
		}
		if n.Restarted {
			note = "restarted: holds none of its vbuckets"
		}
		if n.LastErr != "" && !n.Healthy {
			note = n.LastErr
		}
		fmt.Fprintf(tw, "%s\t%v\t%s\t%d\t%d\t%s\n", n.Addr, n.Member, health, n.Active, n.Replica, note)
	}
	tw.Flush()
	if len(s.FailedOver) > 0 {
		fmt.Fprintf(stdout, "\nfailed over: %s\n", strings.Join(s.FailedOver, " "))
	}
	if r := s.Rebalance; r != nil {
		fmt.Fprintf(stdout, "\n%s\n", rebalanceLine(r))
	}
	return 0
}

// rebalanceLine describes a rebalance in one line.
func rebalanceLine(r *mgrclient.Rebalance) string {
	switch {
	case r.Running && r.Stopping:
		return fmt.Sprintf("rebalance stopping: %d of %d vbuckets moved", r.Done, r.Total)
	case r.Running:
		return fmt.Sprintf("rebalance running: %d of %d vbuckets moved, %s", r.Done, r.Total, mb(r.Bytes))
	case r.Err != "":
		return fmt.Sprintf("last rebalance failed after %d of %d vbuckets: %s", r.Done, r.Total, r.Err)
	}
	return fmt.Sprintf("last rebalance: %d of %d vbuckets moved in %v; %s", r.Done, r.Total, r.Finished.Sub(r.Started).Round(time.Millisecond), rebalanceRates(r))
}

// rebalanceRates is "actives 152.6 MB (38.2 MB/s), replicas 160.1 MB
// (40.0 MB/s), all 312.7 MB (78.2 MB/s)": the data a finished rebalance
// streamed, over its whole time (the manager's clock, start to finish).
func rebalanceRates(r *mgrclient.Rebalance) string {
	secs := r.Finished.Sub(r.Started).Seconds()
	rate := func(b uint64) string {
		if secs <= 0 {
			return mb(b)
		}
		return fmt.Sprintf("%s (%.1f MB/s)", mb(b), float64(b)/1e6/secs)
	}
	return fmt.Sprintf("actives %s, replicas %s, all %s", rate(r.Bytes), rate(r.ReplicaBytes), rate(r.Bytes+r.ReplicaBytes))
}

func mb(b uint64) string { return fmt.Sprintf("%.1f MB", float64(b)/1e6) }

func ctlRebalance(args []string, stdout, stderr io.Writer) int {
	fs := ctlFlags("rebalance", "[--manager URL] [--cluster-auth FILE] [--wait]", stderr)
	mu := ctlManagerOpts(fs)
	wait := fs.Bool("wait", false, "return when the rebalance has finished (non-zero exit if it failed)")
	if st, done := parseCtl(fs, args, stderr); done {
		return st
	}
	mc, err := mu.client()
	if err != nil {
		return ctlManagerErr(stderr, "rebalance", err)
	}
	if err := mc.StartRebalance(context.Background()); err != nil {
		return ctlManagerErr(stderr, "rebalance", err)
	}
	if !*wait {
		fmt.Fprintln(stdout, "rebalance started; \"vbcache ctl status\" shows its progress")
		return 0
	}
	start := time.Now()
	for {
		s, err := mc.Status(context.Background())
		if err != nil {
			fmt.Fprintf(stderr, "\nvbcache ctl rebalance: %v\n", err)
			return 1
		}
		r := s.Rebalance
		if r == nil {
			fmt.Fprintln(stderr, "\nvbcache ctl rebalance: the manager reports no rebalance")
			return 1
		}
		fmt.Fprintf(stdout, "\r%s", progressBar(r, time.Since(start)))
		if !r.Running {
			fmt.Fprintln(stdout)
			if r.Err != "" {
				fmt.Fprintf(stderr, "vbcache ctl rebalance: failed: %s\n", r.Err)
				return 1
			}
			fmt.Fprintf(stdout, "rebalance done: %d vbuckets moved in %v\n", r.Done, time.Since(start).Round(time.Millisecond))
			fmt.Fprintln(stdout, rebalanceRates(r))
			return 0
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// progressBar renders "[#####.....] 412/768 vbuckets  12.3 MB  ETA 5s".
func progressBar(r *mgrclient.Rebalance, elapsed time.Duration) string {
	const width = 30
	frac := 1.0
	if r.Total > 0 {
		frac = float64(r.Done) / float64(r.Total)
	}
	n := int(frac * width)
	bar := strings.Repeat("#", n) + strings.Repeat(".", width-n)
	eta := "?"
	if r.Done > 0 && r.Done < r.Total {
		eta = (time.Duration(float64(elapsed) / frac * (1 - frac))).Round(time.Second).String()
	} else if r.Done >= r.Total {
		eta = "0s"
	}
	return fmt.Sprintf("[%s] %d/%d vbuckets  %s  ETA %s   ", bar, r.Done, r.Total, mb(r.Bytes), eta)
}

func ctlMap(args []string, stdout, stderr io.Writer) int {
	fs := ctlFlags("map", "[--manager URL] [--json]", stderr)
	mu := ctlManagerOpts(fs)
	asJSON := fs.Bool("json", false, "print the cluster config JSON the nodes and clients get")
	if st, done := parseCtl(fs, args, stderr); done {
		return st
	}
	mc, err := mu.client()
	if err != nil {
		return ctlManagerErr(stderr, "map", err)
	}
	if *asJSON {
		raw, err := mc.Config(context.Background())
		var buf bytes.Buffer
		if err == nil {
			err = json.Indent(&buf, raw, "", "  ") // refuses what is not JSON
		}
		if err != nil {
			fmt.Fprintf(stderr, "vbcache ctl map: %v\n", err)
			return 1
		}
		buf.WriteByte('\n')
		stdout.Write(buf.Bytes())
		return 0
	}
	m, err := mc.Map(context.Background())
	if err != nil {
		fmt.Fprintf(stderr, "vbcache ctl map: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "rev %d, %d vbuckets\n", m.Rev, len(m.Map))
	for i, s := range m.Servers {
		fmt.Fprintf(stdout, "  %d  %s\n", i, s)
	}
	fmt.Fprintln(stdout, "vbucket: active replicas…")
	for vb, row := range m.Map {
		fmt.Fprintf(stdout, "%5d: %v", vb, row)
		if m.Forward != nil && fmt.Sprint(m.Forward[vb]) != fmt.Sprint(row) {
			fmt.Fprintf(stdout, " -> %v", m.Forward[vb])
		}
		fmt.Fprintln(stdout)
	}
	return 0
}
