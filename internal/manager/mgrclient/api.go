package mgrclient

import "time"

// Status is what GET /status answers: the cluster as the manager that
// answers sees it.
type Status struct {
	Leader      string       `json:"leader"`
	This        string       `json:"this"`
	Leading     bool         `json:"leading"`
	Rev         int64        `json:"rev"`
	NumVBuckets int          `json:"numVBuckets"`
	Replicas    int          `json:"replicas"`
	Nodes       []NodeStatus `json:"nodes"`
	FailedOver  []string     `json:"failedOver,omitempty"`
	Rebalance   *Rebalance   `json:"rebalance,omitempty"`
}

// NodeStatus is one server's line in Status.
type NodeStatus struct {
	Addr     string `json:"addr"`
	Member   bool   `json:"member"`
	Healthy  bool   `json:"healthy"`
	Active   int    `json:"active"`
	Replica  int    `json:"replica"`
	DownFor  string `json:"downFor,omitempty"`
	LastErr  string `json:"error,omitempty"`
	Probed   bool   `json:"probed"`
	Incoming int    `json:"incoming,omitempty"` // vbuckets the rebalance will give it
	// Lease is what this leader's grants gave the node (internal/manager,
	// fencing.go).
	Lease *LeaseStatus `json:"lease,omitempty"`
	// Incarnation, Holds and HoldsActive are what the node's last answer
	// to a grant said (internal/manager, restart.go): its incarnation, in
	// hex, chosen at its start, the vbuckets it holds as active, replica
	// or pending, and those it holds active. Absent when not known (no
	// answer yet, or a node too old to say).
	Incarnation string `json:"incarnation,omitempty"`
	Holds       *int   `json:"holds,omitempty"`
	HoldsActive *int   `json:"holdsActive,omitempty"`
	// Restarted: the node answered, twice in a row, that it holds no
	// active vbucket (or, after a new incarnation, fewer than the map
	// gives it) while the map gives it actives: it restarted and lost its
	// data, and is failed over (or, with automatic failover off or no
	// replicas, waits for an operator's).
	Restarted bool `json:"restarted,omitempty"`
	// OpsPerSec, LagSeqnos and LagBytes come from the manager's samples
	// of the node's stats, taken while a web console watches (absent
	// otherwise, or when the node did not answer lately): its requests
	// per second (gets, sets, deletes, incr/decr, touches), and how far
	// its replicas trail it, summed over its producer streams: mutations
	// not yet acknowledged, and their bytes.
	OpsPerSec *float64 `json:"opsPerSec,omitempty"`
	LagSeqnos *uint64  `json:"lagSeqnos,omitempty"`
	LagBytes  *uint64  `json:"lagBytes,omitempty"`
}

// LeaseStatus is the leader's view of a node's lease.
type LeaseStatus struct {
	Grants   uint64 `json:"grants"`                // grants sent
	Answered uint64 `json:"answered"`              // the newest grant answered
	Ago      string `json:"answeredAgo,omitempty"` // how long ago
	// Vouched is how long the node has held a lease without a break,
	// as far as the leader can be sure.
	Vouched string `json:"vouchedFor,omitempty"`
	// Quorums are the quorum sets the node may hold (more than one
	// while it has not answered a grant naming the newest).
	Quorums [][]string `json:"quorums,omitempty"`
	Stopped bool       `json:"stopped,omitempty"` // no more grants: being failed over
}

// Rebalance is a rebalance's progress. The manager keeps it in its state
// (manager.State), so that a new leader resumes it, and shows it in
// Status.
type Rebalance struct {
	Running  bool     `json:"running"`
	Stopping bool     `json:"stopping,omitempty"`
	Target   []string `json:"target"`
	Total    int      `json:"total"` // vbuckets whose row changes
	Done     int      `json:"done"`
	Bytes    uint64   `json:"bytes"` // bytes of the vbuckets moved so far (their actives')
	// ReplicaBytes are the bytes of the replicas built so far (a
	// vbucket's bytes once per replica streamed to a new node).
	ReplicaBytes uint64    `json:"replicaBytes,omitempty"`
	Started      time.Time `json:"started"`
	Finished     time.Time `json:"finished,omitzero"`
	Err          string    `json:"error,omitempty"`
	// Moving holds the vbuckets whose new active is committed but whose
	// move is not finished (replicas, deleting the old copy), each with
	// its old active: a new leader finishes them, though their row may
	// already equal the forward row.
	Moving map[int]string `json:"moving,omitempty"`
}

// Map is what GET /map answers: the map as the manager holds it. Map and
// Forward index Servers; Forward is the running rebalance's target (nil
// when none runs). The fields are in the order of their JSON names, which
// is the order of the keys in the answer.
type Map struct {
	Replicas int      `json:"replicas"`
	Rev      int64    `json:"rev"`
	Servers  []string `json:"servers"`
	Map      [][]int  `json:"vBucketMap"`
	Forward  [][]int  `json:"vBucketMapForward"`
}
