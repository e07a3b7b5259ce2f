package server

import (
	"encoding/binary"

	"github.com/vbcache/vbcache/internal/protocol"
)

// Bootstrap opcodes of Couchbase's binary protocol (kv_engine
// docs/BinaryProtocol.md), served in cluster mode only, so that a
// vbucket-aware SDK (gocbcore, libcouchbase) can connect with the binary
// protocol alone: HELLO, SASL (sasl.go), SELECT_BUCKET, then
// GET_CLUSTER_CONFIG (cluster.go) for the map. In standalone mode these
// opcodes answer "Unknown command" as memcached does.
//
// HELLO (0x1f). Key: the client's agent name (ignored, of any length:
// the 250-byte key limit does not apply); value: a list of
// 2-byte big-endian feature codes; no extras. The reply's value is the
// subset of the requested codes that vbcache implements, each once, in
// the order requested. Codes considered:
//
//	0x03 TCPNODELAY     acknowledged on TCP connections: Go sets
//	                    TCP_NODELAY on every accepted TCP socket already.
//	0x08 Select bucket  acknowledged: SELECT_BUCKET is served (below).
//	0x01 Datatype, 0x02 TLS         obsolete, never acknowledged.
//	0x04 MutationSeqno  no: mutations return no vbucket uuid/seqno extras.
//	0x05 TCPDELAY       no: vbcache does not turn Nagle back on.
//	0x06 XATTR, 0x0a Snappy, 0x0b JSON, 0x13 SnappyEverywhere: no, values
//	                    are stored and returned raw with datatype 0.
//	0x07 XERROR         no: vbcache has no error map and sends only the
//	                    classic statuses.
//	0x0c Duplex, 0x0d/0x1f ClustermapChangeNotification(Brief): no
//	                    server-initiated packets are sent.
//	0x0e UnorderedExecution: no (replies stay in request order, which is
//	                    allowed, but the feature is not negotiated).
//	0x0f Tracing, 0x10 AltRequest, 0x11 SyncReplication, 0x12 Collections,
//	0x14 PreserveTTL, 0x16 PITR, 0x17 CreateAsDeleted, 0x19
//	ReplaceBodyWithXattr, 0x1a ReportUnitUsage, 0x1c SubdocReplicaRead,
//	0x1d GetClusterConfigWithKnownVersion, 0x1e
//	DedupeNotMyVbucketClustermap: no, none implemented.
//
// A value of odd length, extras, or more than maxHelloFeatures codes are
// Invalid arguments. HELLO may be sent again; it only answers, there is no
// per-connection feature state to reset.
//
// SELECT_BUCKET (0x89). Key: the bucket name, no extras or value. A node
// serves one bucket, "default": that name answers OK, any other name
// KEY_ENOENT (0x01, "Not found"), which is what Couchbase's memcached
// returns for a bucket that does not exist (0x24 EACCESS is its answer for
// a bucket the user may not access, which does not arise here).
// Selecting is not required: key commands are served without it, as
// before, so plain memcached clients keep working.
//
// GET_ERROR_MAP (0xfe) answers "Unknown command" (0x81): the issue allows
// it, XERROR is not acknowledged, and gocbcore treats a failed error-map
// fetch as non-fatal (it logs it and goes on bootstrapping).
//
// With SASL (-S), HELLO and GET_ERROR_MAP are accepted before
// authentication (as in Couchbase; gocbcore pipelines them ahead of
// SASL_AUTH); SELECT_BUCKET needs an authenticated connection.

// maxHelloFeatures bounds the feature list of a HELLO request. Couchbase
// defines fewer than 40 codes.
const maxHelloFeatures = 256

// preAuthClusterOp reports whether op is allowed before SASL
// authentication in cluster mode, besides the SASL opcodes and VERSION.
func preAuthClusterOp(op protocol.Opcode) bool {
	return op == protocol.OpHello || op == protocol.OpGetErrorMap
}

// binBootstrap serves HELLO, SELECT_BUCKET and GET_ERROR_MAP in cluster
// mode; the arguments and results are binCluster's.
func (c *conn) binBootstrap(op protocol.Opcode, extras, key, rest []byte, vlen, hk int) (used, need int, handled bool) {
	skip := func() (int, int, bool) {
		c.swallowData(vlen, rest)
		return hk + min(max(vlen, 0), len(rest)), 0, true
	}
	switch op {
	case protocol.OpHello:
		if len(extras) != 0 || vlen < 0 || vlen%2 != 0 || vlen > 2*maxHelloFeatures {
			c.binError(protocol.StatusInvalid)
			return skip()
		}
		if len(rest) < vlen {
			return 0, hk + vlen, true
		}
		c.binOK(0, nil, nil, c.helloFeatures(rest[:vlen]))
		return hk + vlen, 0, true
	case protocol.OpSelectBucket:
		if len(extras) != 0 || len(key) == 0 || vlen != 0 {
			c.binError(protocol.StatusInvalid)
			return skip()
		}
		if string(key) != DefaultBucket {
			c.binError(protocol.StatusKeyNotFound)
			return skip()
		}
		c.binOK(0, nil, nil, nil)
		return skip()
	case protocol.OpGetErrorMap:
		c.binError(protocol.StatusUnknown)
		return skip()
	}
	return 0, 0, false
}

// DefaultBucket is the one bucket a cluster-mode node serves.
const DefaultBucket = "default"

// helloFeatures returns the reply value for the requested feature codes.
func (c *conn) helloFeatures(req []byte) []byte {
	var out []byte
	var seen [2]bool // TCPNODELAY, Select bucket
	for i := 0; i+1 < len(req); i += 2 {
		f := protocol.HelloFeature(binary.BigEndian.Uint16(req[i:]))
		switch {
		case f == protocol.FeatureTCPNoDelay && !seen[0] && c.isTCP():
			seen[0] = true
		case f == protocol.FeatureSelectBucket && !seen[1]:
			seen[1] = true
		default:
			continue
		}
		out = binary.BigEndian.AppendUint16(out, uint16(f))
	}
	return out
}

// isTCP reports whether the connection came in on a TCP listener (plain
// or TLS), whose sockets Go opens with TCP_NODELAY.
func (c *conn) isTCP() bool {
	return c.listen != nil && c.listen.Network() == "tcp"
}
