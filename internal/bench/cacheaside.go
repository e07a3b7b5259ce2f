package bench

// The cache-aside driver of the hit-ratio harness (hitratio.go): one
// connection that uses a server the way a look-aside cache is used, get
// and, on a miss, set, in pipelined batches. It is deterministic: the
// sequence of gets is a function of the Config (its pattern, key range and
// seed) alone, so two servers driven with the same Config see the same
// gets, and only the sets (one per miss) differ between them.

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"github.com/vbcache/vbcache/internal/protocol"
)

// DefaultHitBatch is the number of gets the cache-aside driver sends
// together.
const DefaultHitBatch = 64

// asidePlan is one cache-aside run: the keys and values of load (its
// Pattern, ZipfAlpha, ScanLength, ScanEvery, key range, value sizes, Seed
// and Timeout; its Servers, Ratio and Requests are ignored), warmup gets
// not counted, then counted gets, batch at a time.
type asidePlan struct {
	load            Config
	warmup, counted uint64
	batch           int
}

// hitCounts is what a cache-aside run counted.
type hitCounts struct {
	WarmupRequests uint64 `json:"warmup_requests"`
	WarmupHits     uint64 `json:"warmup_hits"`
	Requests       uint64 `json:"requests"` // counted gets
	Hits           uint64 `json:"hits"`
	// ZipfRequests and ZipfHits count the counted gets drawn from the
	// Zipf distribution, leaving out the scans' (scan pattern only).
	ZipfRequests uint64 `json:"zipf_requests,omitempty"`
	ZipfHits     uint64 `json:"zipf_hits,omitempty"`
	Sets         uint64 `json:"sets"`         // of the counted phase: one per miss
	RefusedSets  uint64 `json:"refused_sets"` // answered with anything but STORED, over both phases
	// KeysDigest is a hash of the whole sequence of gets (both phases):
	// equal digests mean two servers were asked the same.
	KeysDigest string `json:"keys_digest"`
	// ReadBack tells of the last value set, read back at the end and
	// compared byte for byte with what was stored.
	ReadBack string `json:"read_back"`
}

// errReadBack is returned when the value read back differs from the one
// stored (or is missing).
var errReadBack = errors.New("bench: read back")

// cacheAside drives the server at addr with p: per batch, the gets of
// batch keys in one write, their replies, then a set of every key that
// missed in one write and their replies. Requests are counted, not timed:
// the run ends after warmup+counted gets, or when ctx ends or the server
// fails to answer within the timeout. A key that misses twice within one
// batch is set twice (the second get was sent before the first set).
func cacheAside(ctx context.Context, addr string, p asidePlan) (hitCounts, error) {
	var hc hitCounts
	c := p.load
	c.Servers = []string{addr}
	if err := c.Validate(); err != nil {
		return hc, err
	}
	c = c.withDefaults()
	batch := cmp.Or(p.batch, DefaultHitBatch)
	d := net.Dialer{Timeout: c.Timeout}
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return hc, err
	}
	defer nc.Close()
	stop := context.AfterFunc(ctx, func() { nc.SetDeadline(time.Unix(1, 0)) }) // unblocks a read or write at once
	defer stop()

	ks := newKeyspace(&c)
	pick := newPicker(&c, 0, 1)
	w := newWire(Text, ks)
	r := bufio.NewReaderSize(nc, 64<<10)
	wbuf := make([]byte, 0, 64<<10)
	keys := make([]uint64, batch)
	scanned := make([]bool, batch)
	missed := make([]uint64, 0, batch)
	digest := uint64(0x6a09e667f3bcc908)
	var lastSet uint64
	haveSet := false

	// exchange writes wbuf and reads one reply (to op) per key of sent.
	exchange := func(op opKind, sent []uint64, each func(i int, rep reply)) error {
		nc.SetDeadline(time.Now().Add(c.Timeout))
		if _, err := nc.Write(wbuf); err != nil {
			return err
		}
		for i := range sent {
			rep, err := w.readReply(r, op, sent[i:i+1])
			if err != nil {
				if errors.Is(err, os.ErrDeadlineExceeded) && ctx.Err() == nil {
					return errors.New("bench: no reply within the timeout")
				}
				return err
			}
			each(i, rep)
		}
		return nil
	}

	total := p.warmup + p.counted
	for done := uint64(0); done < total; {
		if err := ctx.Err(); err != nil {
			return hc, err
		}
		n := int(min(uint64(batch), total-done))
		wbuf = wbuf[:0]
		for i := range n {
			keys[i] = pick.key()
			scanned[i] = pick.scanned
			digest = mix64(digest ^ keys[i])
			wbuf = w.appendGet(wbuf, keys[i:i+1])
		}
		missed = missed[:0]
		var bad error
		err := exchange(opGet, keys[:n], func(i int, rep reply) {
			if rep.bad > 0 && bad == nil {
				bad = fmt.Errorf("bench: a wrong answer to the get of %s", ks.appendKey(nil, keys[i]))
			}
			hit := rep.hits == 1
			if !hit {
				missed = append(missed, keys[i])
			}
			if done+uint64(i) < p.warmup {
				hc.WarmupRequests++
				hc.WarmupHits += uint64(rep.hits)
				return
			}
			hc.Requests++
			hc.Hits += uint64(rep.hits)
			if c.Pattern == Scan && !scanned[i] {
				hc.ZipfRequests++
				hc.ZipfHits += uint64(rep.hits)
			}
			if !hit {
				hc.Sets++
			}
		})
		if err == nil {
			err = bad
		}
		if err != nil {
			return hc, err
		}
		if len(missed) > 0 {
			wbuf = wbuf[:0]
			for _, k := range missed {
				wbuf = w.appendSet(wbuf, k)
			}
			err := exchange(opSet, missed, func(i int, rep reply) {
				if rep.bad > 0 {
					hc.RefusedSets++
				}
			})
			if err != nil {
				return hc, err
			}
			lastSet, haveSet = missed[len(missed)-1], true
		}
		done += uint64(n)
	}
	hc.KeysDigest = fmt.Sprintf("%016x", digest)
	if haveSet {
		if err := readBack(nc, r, w, lastSet, c.Timeout); err != nil {
			return hc, err
		}
		hc.ReadBack = fmt.Sprintf("%s (%d bytes) identical", ks.appendKey(nil, lastSet), ks.valueSize(lastSet))
	}
	return hc, nil
}

// readBack gets key k and compares its value byte for byte with what w
// stores under it.
func readBack(nc net.Conn, r *bufio.Reader, w *wire, k uint64, timeout time.Duration) error {
	key := w.ks.appendKey(nil, k)
	want := w.value[:w.ks.valueSize(k)]
	nc.SetDeadline(time.Now().Add(timeout))
	if _, err := nc.Write(append(append([]byte("get "), key...), "\r\n"...)); err != nil {
		return err
	}
	text, _, err := readReplyLine(r)
	if err != nil {
		return err
	}
	if protocol.ClassifyReply(text) != protocol.ReplyValue {
		return fmt.Errorf("%w: %s: %q instead of its value", errReadBack, key, text)
	}
	v, ok := protocol.ParseValueLine(text)
	if !ok || !bytes.Equal(v.Key, key) || v.Size != len(want) {
		return fmt.Errorf("%w: %s: %q", errReadBack, key, text)
	}
	got := make([]byte, v.Size+2)
	if _, err := io.ReadFull(r, got); err != nil {
		return err
	}
	if !bytes.Equal(got[:v.Size], want) || string(got[v.Size:]) != "\r\n" {
		return fmt.Errorf("%w: %s: the value read back differs from the one stored", errReadBack, key)
	}
	end, _, err := readReplyLine(r)
	if err != nil {
		return err
	}
	if protocol.ClassifyReply(end) != protocol.ReplyEnd {
		return fmt.Errorf("%w: %s: %q instead of END", errReadBack, key, end)
	}
	return nil
}
