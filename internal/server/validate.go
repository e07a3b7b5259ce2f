package server

// This file fills in Config's defaults and checks a Config the way
// memcached 1.6.18 checks its settings at start-up, with memcached's own
// wording so that scripts and people who know memcached recognise the
// failures. Flag syntax (getopt, "-I 2m", "-o key=value") is
// internal/server/cmdline's business; here we only see the resulting
// struct, in which a zero value means "the default" (so "-c 0" is caught
// by cmdline before it gets here).

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/vbcache/vbcache/internal/vbmap"
)

// Errors matched (with errors.Is) by the errors that Validate and
// ParseListenSpec return. The error text itself is memcached's message.
var (
	// ErrInvalidConfig matches every error Validate returns.
	ErrInvalidConfig = errors.New("server: invalid config")
	// ErrListenAddr matches errors about a -l address that cannot be
	// parsed or resolved. memcached finds these only when it binds, and
	// then exits with EX_OSERR (71) instead of EX_USAGE (64).
	ErrListenAddr = errors.New("server: bad listen address")
)

// validateError is an error with memcached's text that matches
// ErrInvalidConfig, and ErrListenAddr when listen is set.
type validateError struct {
	msg    string
	listen bool
}

func (e *validateError) Error() string { return e.msg }

func (e *validateError) Is(target error) bool {
	return target == ErrInvalidConfig || (e.listen && target == ErrListenAddr)
}

func invalidf(format string, args ...any) error {
	return &validateError{msg: fmt.Sprintf(format, args...)}
}

// Limits memcached enforces on -I (ITEM_SIZE_MAX_LOWER_LIMIT and
// ITEM_SIZE_MAX_UPPER_LIMIT in memcached.h).
const (
	itemSizeMaxLower = 1024
	itemSizeMaxUpper = 1024 * 1024 * 1024
)

// SetDefaults replaces every zero field that has a default with memcached
// 1.6's default, in the same units as the field, so that after it the
// struct reads as the effective settings (what "stats settings" reports).
// It fills the store's sizing fields too, because Validate checks them
// against each other. Fields whose default is "on" (MaxConnsFast,
// LRUCrawler, SlabReassign) cannot be told apart from "off" and are left
// alone: the caller sets them (cmdline starts from on).
func (c *Config) SetDefaults() {
	if c.Port == 0 && !c.PortSet {
		c.Port = 11211
	}
	if c.UnixMask == 0 {
		c.UnixMask = 0o700
	}
	if c.MaxConns == 0 {
		c.MaxConns = 1024
	}
	if c.Threads == 0 {
		c.Threads = 4
	}
	if c.ReqsPerEvent == 0 {
		c.ReqsPerEvent = 20
	}
	if c.Backlog == 0 {
		c.Backlog = 1024
	}
	if c.PrefixDelim == 0 {
		c.PrefixDelim = ':'
	}
	// The store's sizing (-m, -I, -n, -f, the slab page and chunk sizes,
	// the LRU split) defaults to what the store itself would use.
	c.Store.SetSizingDefaults()
	// HashPower stays 0: the store picks its own initial size, and
	// memcached reports hashpower_init 0 when it was not set.
}

// Validate reports the first problem with c, checking in the order
// memcached 1.6.18 does, with its messages (the messages have no
// "vbcache:" prefix; those that are vbcache's own have). It works on a copy
// with defaults filled in, so it may be called before or after SetDefaults.
// Every error matches ErrInvalidConfig; errors about -l addresses also
// match ErrListenAddr. Resolving -l host names may consult DNS.
func (c *Config) Validate() error {
	d := *c
	d.SetDefaults()
	s := &d.Store

	// Checked by memcached while it reads the flags.
	if d.MaxConns <= 0 {
		return invalidf("Maximum connections must be greater than 0")
	}
	if d.Threads <= 0 {
		return invalidf("Number of threads must be greater than 0")
	}
	if d.ReqsPerEvent <= 0 {
		return invalidf("Number of requests per event must be greater than 0")
	}
	if s.GrowthFactor <= 1.0 {
		return invalidf("Factor must be greater than 1")
	}
	if s.ChunkSizeMin <= 0 {
		return invalidf("Chunk size must be greater than 0")
	}
	if n := d.VBuckets; n < 0 || n > vbmap.MaxVBuckets || n&(n-1) != 0 {
		return invalidf("Number of vbuckets must be a power of two up to %d (0: standalone), not %d", vbmap.MaxVBuckets, n)
	}
	if d.VBucketParkTimeout < 0 {
		return invalidf("vbucket park timeout must not be negative")
	}
	if d.Protocol > ProtoBinary {
		return invalidf("Invalid value for binding protocol: %d\n -- should be one of auto, binary, or ascii", d.Protocol)
	}
	if s.HashPower != 0 {
		if s.HashPower < 12 {
			return invalidf("Initial hashtable multiplier of %d is too low", s.HashPower)
		}
		if s.HashPower > 32 {
			return invalidf("Initial hashtable multiplier of %d is too high\n"+
				"Choose a value based on \"STAT hash_power_level\" from a running instance", s.HashPower)
		}
	}
	if s.HotLRUPct < 1 || s.HotLRUPct >= 80 {
		return invalidf("hot_lru_pct must be > 1 and < 80")
	}
	if s.WarmLRUPct < 1 || s.WarmLRUPct >= 80 {
		return invalidf("warm_lru_pct must be > 1 and < 80")
	}

	// vbcache's own checks on values memcached cannot be given (its
	// flags go through atoi and unsigned types).
	if s.MaxBytes < 0 {
		return invalidf("vbcache: memory limit (-m) must be positive, got %d bytes", s.MaxBytes)
	}
	if d.Backlog < 0 {
		return invalidf("vbcache: listen backlog (-b) must not be negative, got %d", d.Backlog)
	}
	if d.MaxConnsPerIP < 0 || d.MaxUnauthConns < 0 {
		return invalidf("vbcache: max_conns_per_ip and max_unauth_conns must not be negative, got %d and %d", d.MaxConnsPerIP, d.MaxUnauthConns)
	}
	if d.UnauthTimeout < 0 {
		return invalidf("vbcache: unauth_timeout must not be negative, got %v", d.UnauthTimeout)
	}
	if d.IdleTimeout < 0 {
		return invalidf("vbcache: idle_timeout must not be negative, got %v", d.IdleTimeout)
	}
	if d.UnixMask > 0o777 {
		return invalidf("vbcache: unix socket mask (-a) %o is not a permission mode", d.UnixMask)
	}
	if s.SlabPageSize <= 0 {
		return invalidf("vbcache: slab page size must be positive, got %d", s.SlabPageSize)
	}
	if s.SlabChunkMax <= 0 {
		return invalidf("slab_chunk_max must be greater than 0")
	}

	// Checked by memcached after the flags, in this order (EX_USAGE).
	if s.ItemSizeMax < itemSizeMaxLower {
		return invalidf("Item max size cannot be less than 1024 bytes.")
	}
	if int64(s.ItemSizeMax) > s.MaxBytes/2 {
		return invalidf("Cannot set item size limit higher than 1/2 of memory max.")
	}
	if s.ItemSizeMax > itemSizeMaxUpper {
		return invalidf("Cannot set item size limit higher than a gigabyte.")
	}
	if s.SlabChunkMax > s.ItemSizeMax {
		return invalidf("slab_chunk_max (bytes: %d) cannot be larger than -I (item_size_max %d)",
			s.SlabChunkMax, s.ItemSizeMax)
	}
	if s.ItemSizeMax%s.SlabChunkMax != 0 {
		return invalidf("-I (item_size_max: %d) must be evenly divisible by slab_chunk_max (bytes: %d)",
			s.ItemSizeMax, s.SlabChunkMax)
	}
	if s.SlabPageSize%s.SlabChunkMax != 0 {
		return invalidf("slab_chunk_max (bytes: %d) must divide evenly into %d (slab_page_size)",
			s.SlabChunkMax, s.SlabPageSize)
	}
	if s.HotLRUPct+s.WarmLRUPct > 80 {
		return invalidf("hot_lru_pct + warm_lru_pct cannot be more than 80%% combined")
	}
	if d.Port > 65535 || d.Port < -1 {
		return invalidf("ERROR: Invalid port number %d.", d.Port)
	}
	if d.UDPPort > 65535 || d.UDPPort < -1 {
		return invalidf("ERROR: Invalid port number %d.", d.UDPPort)
	}

	// memcached finds bad -l entries when it binds (EX_OSERR).
	if d.UnixSocket == "" {
		for _, l := range d.Listen {
			if err := checkListen(l, strings.Join(d.Listen, ","), d.TLS != nil); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkListen parses and resolves one -l entry; all is the whole -l list,
// which memcached names in its message.
func checkListen(l, all string, tlsOn bool) error {
	spec, err := ParseListenSpec(l)
	if err == nil && spec.NoTLS && !tlsOn {
		err = errors.New("'notls' option is valid only when SSL is enabled")
	}
	if err != nil {
		return &validateError{listen: true,
			msg: fmt.Sprintf("%v\nfailed to listen on one of interface(s) %s", err, all)}
	}
	if spec.Host == "" || net.ParseIP(spec.Host) != nil {
		return nil
	}
	if _, err := net.LookupHost(spec.Host); err != nil {
		return &validateError{listen: true,
			msg: fmt.Sprintf("getaddrinfo(): %v\nfailed to listen on one of interface(s) %s", lookupReason(err), all)}
	}
	return nil
}

// lookupReason words a resolver error like getaddrinfo's gai_strerror.
func lookupReason(err error) string {
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) && dnsErr.IsNotFound {
		return "Name or service not known"
	}
	return err.Error()
}

// ListenSpec is one entry of -l, as memcached 1.6.18 reads it:
//
//	[proto[ascii|binary|negotiating]:][tag[name]:]host[:port]
//
// where host may be an IPv6 address, bare ("::1", then without a port) or
// in brackets ("[::1]:11211").
type ListenSpec struct {
	Host     string   // address or name; "" means all interfaces
	Port     int      // the entry's own port; valid if HasPort
	HasPort  bool     // the entry named a port (otherwise -p / -U apply)
	Proto    Protocol // protocol forced for this listener; valid if HasProto
	HasProto bool
	Tag      string // listener tag (1–8 bytes), "" if none
	NoTLS    bool   // "notls:" prefix: plain TCP even with -Z
}

// ParseListenSpec parses one -l entry (the list is split on ',' and ';'
// first). Its errors match ErrListenAddr and ErrInvalidConfig and carry
// memcached's messages.
func ParseListenSpec(s string) (ListenSpec, error) {
	var spec ListenSpec
	bad := func(format string, args ...any) (ListenSpec, error) {
		return ListenSpec{}, &validateError{listen: true, msg: fmt.Sprintf(format, args...)}
	}
	if rest, ok := strings.CutPrefix(s, "notls:"); ok {
		spec.NoTLS = true
		s = rest
	}
	if rest, ok := strings.CutPrefix(s, "proto"); ok && strings.HasPrefix(rest, "[") {
		name, after, ok := strings.Cut(rest[1:], "]")
		if !ok {
			return bad("Invalid protocol spec: %q", rest)
		}
		switch name {
		case "ascii":
			spec.Proto = ProtoASCII
		case "binary":
			spec.Proto = ProtoBinary
		case "negotiating":
			spec.Proto = ProtoAuto
		default:
			return bad("vbcache: unknown listener protocol %q in -l %s", name, s)
		}
		spec.HasProto = true
		s = strings.TrimPrefix(after, ":")
	}
	if rest, ok := strings.CutPrefix(s, "tag"); ok && strings.HasPrefix(rest, "[") {
		tag, after, ok := strings.Cut(rest[1:], "]")
		if !ok {
			return bad("Invalid tag in socket config: %q", rest)
		}
		if len(tag) < 1 || len(tag) > 8 {
			return bad("Listener tags must be between 1 and 8 characters: %q", tag)
		}
		spec.Tag = tag
		s = strings.TrimPrefix(after, ":")
	}
	host, portStr, hasPort := s, "", false
	if strings.HasPrefix(s, "[") {
		h, after, ok := strings.Cut(s[1:], "]")
		if !ok {
			return bad("Invalid IPV6 address: %q", s)
		}
		host = h
		if after != "" {
			p, ok := strings.CutPrefix(after, ":")
			if !ok {
				return bad("Invalid port number: %q", after)
			}
			portStr, hasPort = p, true
		}
	} else if strings.Count(s, ":") == 1 {
		host, portStr, hasPort = strings.Cut(s, ":")
	}
	spec.Host = host
	if hasPort {
		p, err := strconv.Atoi(portStr)
		if err != nil || p < -1 || p > 65535 {
			return bad("Invalid port number: %q", portStr)
		}
		spec.Port, spec.HasPort = p, true
	}
	return spec, nil
}
