package cmdline

import (
	"errors"
	"strconv"
	"strings"

	"github.com/vbcache/vbcache/internal/server"
)

// Finish applies what memcached decides after reading all flags (UDP port
// standing in for the TCP port, -m and -I in bytes, the chunk size for
// large items, slab_sizes, temporary_ttl, -S forcing the binary
// protocol), in memcached's order, leaves the rest to Config.Validate, and
// then reads the TLS certificates and credential files.
func (o *Options) Finish() error {
	c := &o.Config
	s := &c.Store
	if o.napiIDs > 0 {
		threads := c.Threads
		if threads == 0 {
			threads = 4
		}
		if o.napiIDs > threads {
			return fail(ExitUsage, "Number of napi_ids(%d) cannot be greater than number of threads(%d)",
				o.napiIDs, threads)
		}
	}
	if o.itemSizeSet {
		if o.itemSize < 1024 {
			return fail(ExitUsage, "Item max size cannot be less than 1024 bytes.")
		}
		s.ItemSizeMax = int(o.itemSize)
	}
	if o.memSet {
		if o.memMB <= 0 {
			// memcached: 0 (or garbage) leaves no room for any item.
			return fail(ExitUsage, "Cannot set item size limit higher than 1/2 of memory max.")
		}
		s.MaxBytes = o.memMB << 20
	}
	if s.ItemSizeMax > 1<<20 && !o.chunkMaxSet {
		s.SlabChunkMax = 0 // the default, half a page, even after no_modern
	}
	if o.udpSet && c.UDPPort != 0 && !o.tcpSet {
		c.Port, c.PortSet = c.UDPPort, true
	}
	var d server.Config = *c
	d.SetDefaults()
	// The item size checks come before slab_sizes in memcached.
	if err := checkItemSize(&d); err != nil {
		return err
	}
	if o.slabSizesRaw != nil {
		sizes, err := parseSlabSizes(*o.slabSizesRaw, d.Store.ChunkSizeMin, d.Store.SlabChunkMax)
		if err != nil {
			return err
		}
		o.slabSizes = sizes
	}
	if d.Store.HotLRUPct+d.Store.WarmLRUPct > 80 {
		return fail(ExitUsage, "hot_lru_pct + warm_lru_pct cannot be more than 80%% combined")
	}
	if o.tempTTLSet && !o.lruMaintain {
		return fail(ExitUsage, "temporary_ttl requires lru_maintainer to be enabled")
	}
	if err := o.checkSASLProtocol(); err != nil {
		return err
	}
	if err := o.checkAuthFileProtocol(); err != nil {
		return err
	}
	err := c.Validate()
	if err != nil && !errors.Is(err, server.ErrListenAddr) {
		return &ExitError{Code: ExitUsage, Msg: err.Error()}
	}
	// memcached finds bad -l entries when it binds, after it has loaded
	// the certificates and the auth file; and a "notls:" entry is only
	// valid once TLS is on, so the listen check is repeated then.
	if err := o.finishSecurity(); err != nil {
		return err
	}
	if err != nil {
		if err := c.Validate(); err != nil {
			code := ExitUsage
			if errors.Is(err, server.ErrListenAddr) {
				code = ExitOSErr
			}
			return &ExitError{Code: code, Msg: err.Error()}
		}
	}
	return nil
}

// checkItemSize runs just the -I checks of Validate, so that they are
// reported before slab_sizes problems as memcached does.
func checkItemSize(d *server.Config) error {
	probe := server.Config{Store: d.Store}
	probe.Store.HotLRUPct, probe.Store.WarmLRUPct = 0, 0
	probe.Store.HashPower = 0
	if err := probe.Validate(); err != nil {
		return &ExitError{Code: ExitUsage, Msg: err.Error()}
	}
	return nil
}

// parseSlabSizes checks -o slab_sizes=a-b-c as memcached's
// _parse_slab_sizes does. vbcache's store derives its classes from -f and
// -n, so the list is only checked.
func parseSlabSizes(list string, minSize, maxSize int) ([]int, error) {
	const chunkAlign = 8
	if list == "" {
		return nil, fail(ExitUsage, "slab size 0 is out of valid range")
	}
	var sizes []int
	last := 0
	for _, p := range strings.FieldsFunc(list, func(r rune) bool { return r == '-' }) {
		n, err := strconv.ParseUint(strings.TrimSpace(p), 10, 32)
		size := int(n)
		if err != nil || size < minSize || size > maxSize {
			return nil, fail(ExitUsage, "slab size %d is out of valid range", size)
		}
		if last >= size {
			return nil, fail(ExitUsage, "slab size %d cannot be lower than or equal to a previous class size", size)
		}
		if size <= last+chunkAlign {
			return nil, fail(ExitUsage, "slab size %d must be at least %d bytes larger than previous class", size, chunkAlign)
		}
		sizes = append(sizes, size)
		last = size
		if len(sizes) >= 63 { // MAX_NUMBER_OF_SLAB_CLASSES-1
			return nil, fail(ExitUsage, "too many slab classes specified")
		}
	}
	return sizes, nil
}
