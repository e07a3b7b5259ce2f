package protocol

import (
	"encoding/binary"
	"errors"
)

// The binary protocol (memcached's doc/protocol-binary.txt). Every packet
// starts with a 24-byte header, big-endian:
//
//	 Byte/     0       |       1       |       2       |       3       |
//	    /              |               |               |               |
//	   |0 1 2 3 4 5 6 7|0 1 2 3 4 5 6 7|0 1 2 3 4 5 6 7|0 1 2 3 4 5 6 7|
//	   +---------------+---------------+---------------+---------------+
//	  0| Magic         | Opcode        | Key length                    |
//	   +---------------+---------------+---------------+---------------+
//	  4| Extras length | Data type     | vbucket id (req) / status (res)|
//	   +---------------+---------------+---------------+---------------+
//	  8| Total body length (extras + key + value)                      |
//	   +---------------+---------------+---------------+---------------+
//	 12| Opaque (echoed in the response)                               |
//	   +---------------+---------------+---------------+---------------+
//	 16| CAS                                                           |
//	   |                                                               |
//	   +---------------+---------------+---------------+---------------+
//
// The body follows: extras, then the key, then the value. A vbucket-aware
// request carries its vbucket id in bytes 6-7, which memcached ignores
// ("reserved"); the response puts its status there.

// HeaderLen is the size of a binary packet header.
const HeaderLen = 24

// Magic bytes.
const (
	MagicRequest  = 0x80
	MagicResponse = 0x81
)

// Opcode is a binary protocol command.
type Opcode uint8

// Opcodes memcached implements (Q: quiet variant), plus the SASL and
// vbucket opcodes.
const (
	OpGet        Opcode = 0x00
	OpSet        Opcode = 0x01
	OpAdd        Opcode = 0x02
	OpReplace    Opcode = 0x03
	OpDelete     Opcode = 0x04
	OpIncrement  Opcode = 0x05
	OpDecrement  Opcode = 0x06
	OpQuit       Opcode = 0x07
	OpFlush      Opcode = 0x08
	OpGetQ       Opcode = 0x09
	OpNoop       Opcode = 0x0a
	OpVersion    Opcode = 0x0b
	OpGetK       Opcode = 0x0c
	OpGetKQ      Opcode = 0x0d
	OpAppend     Opcode = 0x0e
	OpPrepend    Opcode = 0x0f
	OpStat       Opcode = 0x10
	OpSetQ       Opcode = 0x11
	OpAddQ       Opcode = 0x12
	OpReplaceQ   Opcode = 0x13
	OpDeleteQ    Opcode = 0x14
	OpIncrementQ Opcode = 0x15
	OpDecrementQ Opcode = 0x16
	OpQuitQ      Opcode = 0x17
	OpFlushQ     Opcode = 0x18
	OpAppendQ    Opcode = 0x19
	OpPrependQ   Opcode = 0x1a
	OpVerbosity  Opcode = 0x1b
	OpTouch      Opcode = 0x1c
	OpGAT        Opcode = 0x1d
	OpGATQ       Opcode = 0x1e
	OpHello      Opcode = 0x1f
	OpSASLList   Opcode = 0x20
	OpSASLAuth   Opcode = 0x21
	OpSASLStep   Opcode = 0x22
	OpGATK       Opcode = 0x23
	OpGATKQ      Opcode = 0x24
	OpSetVBucket Opcode = 0x3d
	OpGetVBucket Opcode = 0x3e
	OpDelVBucket Opcode = 0x3f
	// OpGetReplica reads a key from a replica vbucket (Couchbase).
	OpGetReplica Opcode = 0x83
	// OpSetClusterConfig stores the cluster config JSON on a node
	// (key: bucket name; optional extras: 8-byte epoch, 8-byte revision).
	OpSetClusterConfig Opcode = 0xb4
	// OpGetClusterConfig returns the node's cluster config JSON.
	OpGetClusterConfig Opcode = 0xb5
	// OpSelectBucket picks the bucket a connection works on (key: the
	// bucket name; Couchbase).
	OpSelectBucket Opcode = 0x89
	// OpLease grants a node a lease to serve its active vbuckets (vbcache;
	// extras: 4-byte duration in ms, 8-byte epoch, 8-byte grant number,
	// 8-byte number of the grant it runs from; key: the node's address;
	// value: the quorum set, comma-separated addresses; value of the
	// answer: 8-byte incarnation, 4-byte count of vbuckets held, empty
	// from older nodes). See internal/server/lease.go.
	OpLease Opcode = 0xe8
	// OpLeaseQuery asks a node whether it holds a manager's lease (vbcache;
	// value of the answer: 4-byte ms left, 8-byte revEpoch, 8-byte rev).
	OpLeaseQuery Opcode = 0xe9
	// OpGetErrorMap asks for the server's error map (value: 2-byte
	// version; Couchbase).
	OpGetErrorMap Opcode = 0xfe
)

// HelloFeature is a feature code negotiated by HELLO (0x1f): the request
// value is a list of 2-byte big-endian codes, the response value the
// subset the server enables (Couchbase kv_engine docs/BinaryProtocol.md).
type HelloFeature uint16

// HELLO feature codes. Only some are acknowledged by vbcache (see
// internal/server/bootstrap.go); the others are named here so that the
// choice not to acknowledge them is explicit.
const (
	FeatureDatatype             HelloFeature = 0x01 // obsolete
	FeatureTLS                  HelloFeature = 0x02 // obsolete
	FeatureTCPNoDelay           HelloFeature = 0x03
	FeatureMutationSeqno        HelloFeature = 0x04
	FeatureTCPDelay             HelloFeature = 0x05
	FeatureXattr                HelloFeature = 0x06
	FeatureXerror               HelloFeature = 0x07
	FeatureSelectBucket         HelloFeature = 0x08
	FeatureSnappy               HelloFeature = 0x0a
	FeatureJSON                 HelloFeature = 0x0b
	FeatureDuplex               HelloFeature = 0x0c
	FeatureClustermapNotif      HelloFeature = 0x0d
	FeatureUnorderedExecution   HelloFeature = 0x0e
	FeatureTracing              HelloFeature = 0x0f
	FeatureAltRequest           HelloFeature = 0x10
	FeatureSyncReplication      HelloFeature = 0x11
	FeatureCollections          HelloFeature = 0x12
	FeatureSnappyEverywhere     HelloFeature = 0x13
	FeaturePreserveTTL          HelloFeature = 0x14
	FeaturePITR                 HelloFeature = 0x16
	FeatureCreateAsDeleted      HelloFeature = 0x17
	FeatureReplaceBodyXattr     HelloFeature = 0x19
	FeatureReportUnitUsage      HelloFeature = 0x1a
	FeatureSubdocReplicaRead    HelloFeature = 0x1c
	FeatureConfigKnownVersion   HelloFeature = 0x1d
	FeatureDedupeNotMyVBConfig  HelloFeature = 0x1e
	FeatureClustermapNotifBrief HelloFeature = 0x1f
)

// Loud maps a quiet opcode to its normal form and reports whether it was
// quiet (memcached's dispatch_bin_command does the same rewrite).
func (op Opcode) Loud() (Opcode, bool) {
	switch op {
	case OpSetQ:
		return OpSet, true
	case OpAddQ:
		return OpAdd, true
	case OpReplaceQ:
		return OpReplace, true
	case OpDeleteQ:
		return OpDelete, true
	case OpIncrementQ:
		return OpIncrement, true
	case OpDecrementQ:
		return OpDecrement, true
	case OpQuitQ:
		return OpQuit, true
	case OpFlushQ:
		return OpFlush, true
	case OpAppendQ:
		return OpAppend, true
	case OpPrependQ:
		return OpPrepend, true
	case OpGetQ:
		return OpGet, true
	case OpGetKQ:
		return OpGetK, true
	case OpGATQ:
		return OpGAT, true
	case OpGATKQ:
		return OpGATK, true
	}
	return op, false
}

// Status is a binary response status.
type Status uint16

// Response statuses.
const (
	StatusOK            Status = 0x0000
	StatusKeyNotFound   Status = 0x0001
	StatusKeyExists     Status = 0x0002
	StatusTooLarge      Status = 0x0003
	StatusInvalid       Status = 0x0004
	StatusNotStored     Status = 0x0005
	StatusDeltaBadValue Status = 0x0006
	StatusNotMyVBucket  Status = 0x0007
	StatusAuthError     Status = 0x0020
	StatusAuthContinue  Status = 0x0021
	StatusUnknown       Status = 0x0081
	StatusNoMemory      Status = 0x0082
	StatusNotSupported  Status = 0x0083
	StatusInternal      Status = 0x0084 // memcached's EINTERNAL; the body says what failed
	StatusBusy          Status = 0x0085
	StatusTmpFail       Status = 0x0086
	// StatusSyncWriteAmbiguous is Couchbase's: a write that must be
	// replicated before it is answered was stored, but its replication
	// was not confirmed in time; it may or may not survive a failover.
	StatusSyncWriteAmbiguous Status = 0x00a3
)

// Text is the error body memcached sends with a status (write_bin_error).
func (s Status) Text() string {
	switch s {
	case StatusNoMemory:
		return "Out of memory"
	case StatusUnknown:
		return "Unknown command"
	case StatusKeyNotFound:
		return "Not found"
	case StatusInvalid:
		return "Invalid arguments"
	case StatusKeyExists:
		return "Data exists for key."
	case StatusTooLarge:
		return "Too large."
	case StatusDeltaBadValue:
		return "Non-numeric server-side value for incr or decr"
	case StatusNotStored:
		return "Not stored."
	case StatusAuthError:
		return "Auth failure."
	case StatusTmpFail:
		return "Temporary failure"
	case StatusSyncWriteAmbiguous:
		return "Sync write ambiguous: its replication timed out"
	}
	return ""
}

// Header is a decoded packet header. For a request, VBucket holds bytes
// 6-7; for a response, Status does.
type Header struct {
	Magic    uint8
	Opcode   Opcode
	KeyLen   uint16
	ExtLen   uint8
	DataType uint8
	VBucket  uint16
	Status   Status
	BodyLen  uint32
	Opaque   uint32
	CAS      uint64
}

// ErrShortHeader means fewer than HeaderLen bytes were given.
var ErrShortHeader = errors.New("protocol: short binary header")

// ParseHeader decodes a header from b. It does not check the magic byte or
// the lengths: what to do about them is the server's business.
func ParseHeader(b []byte, h *Header) error {
	if len(b) < HeaderLen {
		return ErrShortHeader
	}
	h.Magic = b[0]
	h.Opcode = Opcode(b[1])
	h.KeyLen = binary.BigEndian.Uint16(b[2:4])
	h.ExtLen = b[4]
	h.DataType = b[5]
	v := binary.BigEndian.Uint16(b[6:8])
	if h.Magic == MagicResponse {
		h.Status, h.VBucket = Status(v), 0
	} else {
		h.VBucket, h.Status = v, 0
	}
	h.BodyLen = binary.BigEndian.Uint32(b[8:12])
	h.Opaque = binary.BigEndian.Uint32(b[12:16])
	h.CAS = binary.BigEndian.Uint64(b[16:24])
	return nil
}

// AppendHeader appends the encoding of h (Status for a response magic,
// VBucket otherwise).
func AppendHeader(dst []byte, h *Header) []byte {
	v := h.VBucket
	if h.Magic == MagicResponse {
		v = uint16(h.Status)
	}
	return append(dst,
		h.Magic, byte(h.Opcode),
		byte(h.KeyLen>>8), byte(h.KeyLen),
		h.ExtLen, h.DataType,
		byte(v>>8), byte(v),
		byte(h.BodyLen>>24), byte(h.BodyLen>>16), byte(h.BodyLen>>8), byte(h.BodyLen),
		byte(h.Opaque>>24), byte(h.Opaque>>16), byte(h.Opaque>>8), byte(h.Opaque),
		byte(h.CAS>>56), byte(h.CAS>>48), byte(h.CAS>>40), byte(h.CAS>>32),
		byte(h.CAS>>24), byte(h.CAS>>16), byte(h.CAS>>8), byte(h.CAS))
}

// AppendResponse appends a whole response packet: header, extras, key and
// value (memcached's add_bin_header plus body).
func AppendResponse(dst []byte, op Opcode, status Status, opaque uint32, cas uint64, extras, key, value []byte) []byte {
	h := Header{
		Magic:   MagicResponse,
		Opcode:  op,
		KeyLen:  uint16(len(key)),
		ExtLen:  uint8(len(extras)),
		Status:  status,
		BodyLen: uint32(len(extras) + len(key) + len(value)),
		Opaque:  opaque,
		CAS:     cas,
	}
	dst = AppendHeader(dst, &h)
	dst = append(dst, extras...)
	dst = append(dst, key...)
	return append(dst, value...)
}

// Request is a parsed request packet whose body slices alias the input.
type Request struct {
	Header
	Extras, Key, Value []byte
}

// ParseRequest decodes one whole request packet from the front of b. It
// returns how many bytes the packet takes, or 0 when b does not hold the
// whole packet yet. It fails on a bad magic byte or inconsistent lengths.
func ParseRequest(b []byte, r *Request) (int, error) {
	if err := ParseHeader(b, &r.Header); err != nil {
		return 0, nil
	}
	if r.Magic != MagicRequest {
		return 0, ErrBadMagic
	}
	if int(r.KeyLen)+int(r.ExtLen) > int(r.BodyLen) {
		return 0, ErrBadLengths
	}
	n := HeaderLen + int(r.BodyLen)
	if len(b) < n {
		return 0, nil
	}
	body := b[HeaderLen:n]
	r.Extras = body[:r.ExtLen]
	r.Key = body[r.ExtLen : int(r.ExtLen)+int(r.KeyLen)]
	r.Value = body[int(r.ExtLen)+int(r.KeyLen):]
	return n, nil
}

// AppendRequest appends the encoding of r (its lengths are recomputed from
// the slices).
func AppendRequest(dst []byte, r *Request) []byte {
	h := r.Header
	h.Magic = MagicRequest
	h.KeyLen = uint16(len(r.Key))
	h.ExtLen = uint8(len(r.Extras))
	h.BodyLen = uint32(len(r.Extras) + len(r.Key) + len(r.Value))
	dst = AppendHeader(dst, &h)
	dst = append(dst, r.Extras...)
	dst = append(dst, r.Key...)
	return append(dst, r.Value...)
}

// Errors from ParseRequest.
var (
	ErrBadMagic   = errors.New("protocol: bad magic byte")
	ErrBadLengths = errors.New("protocol: key and extras longer than the body")
)
