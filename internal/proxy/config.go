package proxy

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/vbcache/vbcache/internal/admin"
	"github.com/vbcache/vbcache/internal/sasl"
	"github.com/vbcache/vbcache/memcache"
)

// Config is a proxy's configuration: the pool file's keys, in the spirit of
// twemproxy's YAML. Times are milliseconds, as in twemproxy.
//
//	listen: 127.0.0.1:22121
//	servers:                       # host:port:weight [name] or /unix/path:weight [name], twemproxy's forms
//	  - 127.0.0.1:11211:1
//	  - 127.0.0.1:11212:1
//	distribution: ketama           # ketama | modula | and memcache's names
//	hash: md5                      # see Distribution
//	auto_eject_hosts: false
//	server_retry_timeout: 30000
//	server_failure_limit: 2
//	timeout: 2000
//	server_connections: 1          # per server (default 1: a client's pipelined sets then need not wait)
//
// or, for a vbcache cluster instead of servers:
//
//	cluster:
//	  nodes: [127.0.0.1:11213, 127.0.0.1:11214]   # bootstrap over 0xb5
//	  retry_timeout: 10000                        # ride through failures this long
//	manager: http://127.0.0.1:11212               # or: the manager's streaming map
//
// A twemproxy file whose only top-level key is a pool name (alpha: {listen:
// …}) is accepted too; a file with several pools is refused.
type Config struct {
	Listen             string   `json:"listen"`
	Servers            []string `json:"servers,omitempty"`
	Distribution       string   `json:"distribution,omitempty"`
	Hash               string   `json:"hash,omitempty"`
	AutoEjectHosts     bool     `json:"auto_eject_hosts,omitempty"`
	ServerRetryTimeout int      `json:"server_retry_timeout,omitempty"`
	ServerFailureLimit int      `json:"server_failure_limit,omitempty"`
	Timeout            int      `json:"timeout,omitempty"`
	ServerConnections  int      `json:"server_connections,omitempty"`

	Cluster *ClusterConfig `json:"cluster,omitempty"`
	Manager string         `json:"manager,omitempty"`

	// A choice for comparisons and tests, not in the pool file (and not
	// reloaded: it is read by New): NoRequestHold makes a loop write each
	// request to its server at once instead of holding it for the next
	// answer (writeUp).
	NoRequestHold bool `json:"-"`

	// Upstream is how the proxy reaches its servers, from its flags
	// rather than the pool file: over TLS (Upstream.TLS, for nodes run
	// with -Z; a manager's HTTPS API is verified with it too) and logged
	// in over SASL SCRAM as Upstream.User (a data user of nodes run with
	// -S). nil: plain TCP, no login. Each reload takes the new value,
	// which new server connections use.
	Upstream *admin.Credentials `json:"-"`
	// ManagerLogin, when its User is set, is sent to the manager as HTTP
	// Basic credentials (a read-only login of its --api-readers, from
	// --manager-auth). Its TLS is unused: Upstream's CA verifies the
	// manager.
	ManagerLogin *admin.Credentials `json:"-"`
	// ClientAuth, when not empty, is the users a client must log in as
	// before anything it sends is served (auth.go); from --client-auth.
	// Reload replaces them, but cannot turn them on or off.
	ClientAuth *sasl.Passwords `json:"-"`

	// twemproxy keys accepted and ignored (they have no meaning here, or
	// their default is the only behaviour): backlog, preconnect,
	// client_connections; redis must be false and hash_tag empty.
	Backlog           int    `json:"backlog,omitempty"`
	Preconnect        bool   `json:"preconnect,omitempty"`
	ClientConnections int    `json:"client_connections,omitempty"`
	Redis             bool   `json:"redis,omitempty"`
	HashTag           string `json:"hash_tag,omitempty"`
}

// ClusterConfig is the upstream vbcache cluster.
type ClusterConfig struct {
	// Nodes are bootstrap seeds; the client asks them for the map over
	// binary GET_CLUSTER_CONFIG (0xb5) and follows it.
	Nodes []string `json:"nodes,omitempty"`
	// Manager is the manager's base URL; its streaming endpoint
	// /pools/default/bs/default is followed (same as the top-level key).
	Manager string `json:"manager,omitempty"`
	// RetryTimeout (ms) bounds how long one request is retried while its
	// node fails (a failover in progress). Zero means 10000.
	RetryTimeout int `json:"retry_timeout,omitempty"`
	// RefreshInterval (ms) is how often the map is polled from the nodes
	// besides NOT_MY_VBUCKET. Zero means 1000.
	RefreshInterval int `json:"refresh_interval,omitempty"`
}

// Defaults.
const (
	DefaultTimeout = 2000 * time.Millisecond
	// DefaultServerConnections is a pool's connections per server when
	// server_connections is not set: one, as twemproxy's default. (An
	// event loop sends all of one client's requests to a server over one
	// of them, in order, whatever the number.)
	DefaultServerConnections = 1
	// DefaultClusterConnections is a cluster's connections per node.
	DefaultClusterConnections = 2
	DefaultClusterRetry       = 10 * time.Second
	DefaultClusterRefresh     = time.Second
)

// LoadConfig reads and checks a pool file.
func LoadConfig(path string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	c, err := ParseConfig(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// ParseConfig parses a pool file's YAML (or JSON) and checks it.
func ParseConfig(b []byte) (*Config, error) {
	var top map[string]any
	if err := yaml.Unmarshal(b, &top); err != nil {
		return nil, fmt.Errorf("proxy config: %w", err)
	}
	if _, flat := top["listen"]; !flat && len(top) == 1 {
		// twemproxy's form: one named pool.
		for name, v := range top {
			if _, ok := v.(map[string]any); !ok {
				return nil, fmt.Errorf("proxy config: pool %q is not a mapping", name)
			}
			inner, err := yaml.Marshal(v)
			if err != nil {
				return nil, err
			}
			b = inner
		}
	} else if !flat && len(top) > 1 {
		if _, ok := top["servers"]; !ok {
			if _, ok := top["cluster"]; !ok {
				if _, ok := top["manager"]; !ok {
					return nil, errors.New("proxy config: several pools; vbcache proxy serves one pool per process")
				}
			}
		}
	}
	c := new(Config)
	if err := yaml.UnmarshalStrict(b, c); err != nil {
		return nil, fmt.Errorf("proxy config: %w", err)
	}
	if err := c.Check(); err != nil {
		return nil, err
	}
	return c, nil
}

// Check validates c and fills defaults.
func (c *Config) Check() error {
	if c.Listen == "" {
		return errors.New("proxy config: listen is missing")
	}
	if c.Redis {
		return errors.New("proxy config: redis: true is not supported (memcached protocols only)")
	}
	if c.HashTag != "" {
		return errors.New("proxy config: hash_tag is not supported")
	}
	if c.Manager != "" {
		if c.Cluster == nil {
			c.Cluster = new(ClusterConfig)
		}
		if c.Cluster.Manager != "" && c.Cluster.Manager != c.Manager {
			return errors.New("proxy config: manager given twice with different URLs")
		}
		c.Cluster.Manager = c.Manager
	}
	if c.Cluster != nil {
		if len(c.Servers) > 0 {
			return errors.New("proxy config: servers and cluster/manager are exclusive")
		}
		if len(c.Cluster.Nodes) == 0 && c.Cluster.Manager == "" {
			return errors.New("proxy config: cluster needs nodes or a manager URL")
		}
		if m := c.Cluster.Manager; m != "" {
			u, err := url.Parse(m)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return fmt.Errorf("proxy config: manager %q is not an http(s) URL", m)
			}
		}
		if c.Distribution != "" && c.Distribution != "vbucket" {
			return fmt.Errorf("proxy config: a cluster is routed by vbucket, not %q", c.Distribution)
		}
		if c.Cluster.RetryTimeout < 0 || c.Cluster.RefreshInterval < 0 {
			return errors.New("proxy config: negative cluster timeout")
		}
	} else {
		if len(c.Servers) == 0 {
			return errors.New("proxy config: no servers (or cluster/manager)")
		}
		if _, err := c.servers(); err != nil {
			return err
		}
		if _, err := c.selectorName(); err != nil {
			return err
		}
	}
	if c.Timeout < 0 || c.ServerRetryTimeout < 0 || c.ServerFailureLimit < 0 || c.ServerConnections < 0 {
		return errors.New("proxy config: negative timeout, limit or connection count")
	}
	return nil
}

// servers parses the server list: "host:port:weight [name]" and
// "/unix/path:weight [name]" (twemproxy), "host:port" or a bare path.
func (c *Config) servers() ([]memcache.Server, error) {
	var out []memcache.Server
	for _, s := range c.Servers {
		f := strings.Fields(s)
		if len(f) == 0 || len(f) > 2 {
			return nil, fmt.Errorf("proxy config: bad server %q (want host:port:weight [name])", s)
		}
		ss, err := memcache.ParseServers(f[0])
		if err != nil || len(ss) != 1 {
			return nil, fmt.Errorf("proxy config: bad server %q: %v", s, err)
		}
		out = append(out, ss[0])
	}
	return out, nil
}

// selectorName maps distribution and hash onto a memcache distribution.
//
//	twemproxy distribution + hash      memcache distribution
//	ketama + md5 (or no hash)          ketama (libmemcached weighted ketama)
//	modula + crc32a                    modulo-crc32 (crc32(key) % n)
//	modula + crc32                     modulo (libmemcached crc32: (crc32>>16)&0x7fff)
//	modula + one_at_a_time             modulo-oaat (weights ignored)
//
// memcache's own names (ketama, ketama-spy, modulo, modulo-python,
// modulo-crc32, modulo-oaat) are accepted as they are, with no hash or the
// hash they use. twemproxy's other hashes (fnv1a_64, murmur, jenkins, …)
// and the random distribution are refused: no client library we match
// places keys with them. The default is ketama with md5.
func (c *Config) selectorName() (string, error) {
	d, h := strings.ToLower(c.Distribution), strings.ToLower(c.Hash)
	switch d {
	case "", "ketama":
		if h == "" || h == "md5" {
			return "ketama", nil
		}
	case "ketama-spy":
		if h == "" || h == "md5" {
			return d, nil
		}
	case "modula", "modulo":
		switch h {
		case "crc32a":
			return "modulo-crc32", nil
		case "crc32":
			return "modulo", nil
		case "one_at_a_time":
			return "modulo-oaat", nil
		case "":
			if d == "modulo" {
				return "modulo", nil
			}
			return "", errors.New("proxy config: distribution modula needs hash crc32a, crc32 or one_at_a_time")
		}
	case "modulo-crc32":
		if h == "" || h == "crc32a" {
			return d, nil
		}
	case "modulo-oaat":
		if h == "" || h == "one_at_a_time" {
			return d, nil
		}
	case "modulo-python":
		if h == "" || h == "crc32" {
			return d, nil
		}
	case "random":
		return "", errors.New("proxy config: distribution random is not supported (ketama or modula)")
	default:
		return "", fmt.Errorf("proxy config: unknown distribution %q (ketama, modula, or one of memcache's: ketama-spy, modulo, modulo-python, modulo-crc32, modulo-oaat)", c.Distribution)
	}
	return "", fmt.Errorf("proxy config: hash %q is not supported with distribution %q (ketama: md5; modula: crc32a, crc32, one_at_a_time)", c.Hash, c.Distribution)
}

func (c *Config) timeout() time.Duration {
	if c.Timeout > 0 {
		return time.Duration(c.Timeout) * time.Millisecond
	}
	return DefaultTimeout
}

func (c *Config) conns() int {
	switch {
	case c.ServerConnections > 0:
		return c.ServerConnections
	case c.Cluster != nil || c.Manager != "":
		return DefaultClusterConnections
	}
	return DefaultServerConnections
}

func ms(n int, def time.Duration) time.Duration {
	if n > 0 {
		return time.Duration(n) * time.Millisecond
	}
	return def
}
