package server

import (
	"errors"
	"testing"
	"time"
)

func TestSetDefaults(t *testing.T) {
	var c Config
	c.SetDefaults()
	s := c.Store
	if c.Port != 11211 || c.MaxConns != 1024 || c.Threads != 4 || c.ReqsPerEvent != 20 || c.Backlog != 1024 ||
		c.UnixMask != 0o700 || c.PrefixDelim != ':' || s.MaxBytes != 64<<20 || s.ItemSizeMax != 1<<20 ||
		s.ChunkSizeMin != 48 || s.GrowthFactor != 1.25 || s.SlabPageSize != 1<<20 || s.SlabChunkMax != 512<<10 ||
		s.HotLRUPct != 20 || s.WarmLRUPct != 40 || s.HashPower != 0 {
		t.Errorf("defaults: %+v", c)
	}

	off := Config{Port: 0, PortSet: true}
	off.SetDefaults()
	if off.Port != 0 {
		t.Errorf("-p 0 became port %d", off.Port)
	}

	set := Config{Port: 1234, MaxConns: 7}
	set.Store.ItemSizeMax = 2 << 20
	set.SetDefaults()
	if set.Port != 1234 || set.MaxConns != 7 || set.Store.ItemSizeMax != 2<<20 {
		t.Errorf("SetDefaults overwrote values: %+v", set)
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name   string
		mod    func(c *Config)
		msg    string // "" means valid
		listen bool
	}{
		{"zero config", func(c *Config) {}, "", false},
		{"after SetDefaults", func(c *Config) { c.SetDefaults() }, "", false},
		{"big items", func(c *Config) { c.Store.ItemSizeMax = 4 << 20 }, "", false},
		{"1024m items", func(c *Config) { c.Store.ItemSizeMax = 1 << 30; c.Store.MaxBytes = 4 << 30 }, "", false},
		{"page-size chunks", func(c *Config) { c.Store.SlabChunkMax = 1 << 20 }, "", false},
		{"small chunks", func(c *Config) { c.Store.SlabChunkMax = 16 << 10 }, "", false},
		{"listen ip", func(c *Config) { c.Listen = []string{"127.0.0.1", "[::1]:11300", "::1", "localhost"} }, "", false},
		{"listen prefixes", func(c *Config) { c.Listen = []string{"proto[ascii]:tag[t1]:127.0.0.1:11300"} }, "", false},
		{"ephemeral ports", func(c *Config) { c.Port, c.UDPPort = -1, -1 }, "", false},

		{"maxconns", func(c *Config) { c.MaxConns = -1 }, "Maximum connections must be greater than 0", false},
		{"threads", func(c *Config) { c.Threads = -2 }, "Number of threads must be greater than 0", false},
		{"reqs per event", func(c *Config) { c.ReqsPerEvent = -1 }, "Number of requests per event must be greater than 0", false},
		{"factor", func(c *Config) { c.Store.GrowthFactor = 1.0 }, "Factor must be greater than 1", false},
		{"chunk size", func(c *Config) { c.Store.ChunkSizeMin = -48 }, "Chunk size must be greater than 0", false},
		{"protocol", func(c *Config) { c.Protocol = 9 }, "Invalid value for binding protocol: 9\n -- should be one of auto, binary, or ascii", false},
		{"hashpower low", func(c *Config) { c.Store.HashPower = 11 }, "Initial hashtable multiplier of 11 is too low", false},
		{"hashpower high", func(c *Config) { c.Store.HashPower = 33 },
			"Initial hashtable multiplier of 33 is too high\nChoose a value based on \"STAT hash_power_level\" from a running instance", false},
		{"hot pct", func(c *Config) { c.Store.HotLRUPct = 80 }, "hot_lru_pct must be > 1 and < 80", false},
		{"warm pct", func(c *Config) { c.Store.WarmLRUPct = -1 }, "warm_lru_pct must be > 1 and < 80", false},
		{"hot+warm", func(c *Config) { c.Store.HotLRUPct, c.Store.WarmLRUPct = 41, 40 }, "hot_lru_pct + warm_lru_pct cannot be more than 80% combined", false},
		{"item too small", func(c *Config) { c.Store.ItemSizeMax = 1000 }, "Item max size cannot be less than 1024 bytes.", false},
		{"item over half memory", func(c *Config) { c.Store.ItemSizeMax = 256 << 20 }, "Cannot set item size limit higher than 1/2 of memory max.", false},
		{"item over a gigabyte", func(c *Config) { c.Store.ItemSizeMax = 1025 << 20; c.Store.MaxBytes = 4000 << 20 },
			"Cannot set item size limit higher than a gigabyte.", false},
		{"chunk over item", func(c *Config) { c.Store.ItemSizeMax = 1024 },
			"slab_chunk_max (bytes: 524288) cannot be larger than -I (item_size_max 1024)", false},
		{"item not a chunk multiple", func(c *Config) { c.Store.ItemSizeMax = 1000 << 10 },
			"-I (item_size_max: 1024000) must be evenly divisible by slab_chunk_max (bytes: 524288)", false},
		{"chunk not dividing the page", func(c *Config) { c.Store.SlabChunkMax = 3072; c.Store.ItemSizeMax = 3 << 20 },
			"slab_chunk_max (bytes: 3072) must divide evenly into 1048576 (slab_page_size)", false},
		{"negative chunk max", func(c *Config) { c.Store.SlabChunkMax = -1 }, "slab_chunk_max must be greater than 0", false},
		{"negative memory", func(c *Config) { c.Store.MaxBytes = -1 }, "vbcache: memory limit (-m) must be positive, got -1 bytes", false},
		{"negative backlog", func(c *Config) { c.Backlog = -1 }, "vbcache: listen backlog (-b) must not be negative, got -1", false},
		{"negative idle timeout", func(c *Config) { c.IdleTimeout = -time.Second }, "vbcache: idle_timeout must not be negative, got -1s", false},
		{"unix mask", func(c *Config) { c.UnixMask = 0o1777 }, "vbcache: unix socket mask (-a) 1777 is not a permission mode", false},
		{"tcp port", func(c *Config) { c.Port = 70000 }, "ERROR: Invalid port number 70000.", false},
		{"udp port", func(c *Config) { c.UDPPort = -2 }, "ERROR: Invalid port number -2.", false},
		{"listen port", func(c *Config) { c.Listen = []string{"127.0.0.1:abc"} },
			"Invalid port number: \"abc\"\nfailed to listen on one of interface(s) 127.0.0.1:abc", true},
		{"listen ipv6 bracket", func(c *Config) { c.Listen = []string{"127.0.0.1", "[::1"} },
			"Invalid IPV6 address: \"[::1\"\nfailed to listen on one of interface(s) 127.0.0.1,[::1", true},
		{"listen tag", func(c *Config) { c.Listen = []string{"tag[123456789]:127.0.0.1"} },
			"Listener tags must be between 1 and 8 characters: \"123456789\"\nfailed to listen on one of interface(s) tag[123456789]:127.0.0.1", true},
		{"listen notls", func(c *Config) { c.Listen = []string{"notls:127.0.0.1"} },
			"'notls' option is valid only when SSL is enabled\nfailed to listen on one of interface(s) notls:127.0.0.1", true},
		{"listen unresolvable", func(c *Config) { c.Listen = []string{"fooble"} },
			"getaddrinfo(): Name or service not known\nfailed to listen on one of interface(s) fooble", true},
		{"listen ignored with unix socket", func(c *Config) { c.Listen = []string{"fooble"}; c.UnixSocket = "/tmp/s" }, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c Config
			tt.mod(&c)
			before := c
			err := c.Validate()
			if tt.msg == "" {
				if err != nil {
					t.Fatalf("unexpected error %q", err)
				}
			} else {
				if err == nil || err.Error() != tt.msg {
					t.Fatalf("got %v\nwant %q", err, tt.msg)
				}
				if !errors.Is(err, ErrInvalidConfig) {
					t.Errorf("error does not match ErrInvalidConfig")
				}
				if errors.Is(err, ErrListenAddr) != tt.listen {
					t.Errorf("errors.Is(err, ErrListenAddr) = %v, want %v", !tt.listen, tt.listen)
				}
			}
			if c.Port != before.Port || c.Store != before.Store {
				t.Errorf("Validate modified the config")
			}
		})
	}
}

func TestParseListenSpec(t *testing.T) {
	tests := []struct {
		in   string
		want ListenSpec
	}{
		{"127.0.0.1", ListenSpec{Host: "127.0.0.1"}},
		{"127.0.0.1:11300", ListenSpec{Host: "127.0.0.1", Port: 11300, HasPort: true}},
		{"::1", ListenSpec{Host: "::1"}},
		{"[::1]", ListenSpec{Host: "::1"}},
		{"[::1]:0", ListenSpec{Host: "::1", Port: 0, HasPort: true}},
		{"localhost:-1", ListenSpec{Host: "localhost", Port: -1, HasPort: true}},
		{"proto[binary]:127.0.0.1", ListenSpec{Host: "127.0.0.1", Proto: ProtoBinary, HasProto: true}},
		{"proto[negotiating]:tag[abc]:[::1]:5", ListenSpec{Host: "::1", Port: 5, HasPort: true, Proto: ProtoAuto, HasProto: true, Tag: "abc"}},
		{"tag[x]:0.0.0.0", ListenSpec{Host: "0.0.0.0", Tag: "x"}},
	}
	for _, tt := range tests {
		got, err := ParseListenSpec(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("ParseListenSpec(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
		}
	}
	for _, bad := range []string{"127.0.0.1:70000", "[::1]x", "proto[ascii:1.2.3.4", "proto[http]:1.2.3.4", "tag[]:1.2.3.4"} {
		if _, err := ParseListenSpec(bad); !errors.Is(err, ErrListenAddr) {
			t.Errorf("ParseListenSpec(%q): err %v, want ErrListenAddr", bad, err)
		}
	}
}
