package cmdline

// Authentication and TLS flags: -S (SASL), -Y (ascii auth file), -Z
// (TLS) and the -o ssl_* options, read as memcached 1.6.18 reads them.
// The option checks happen while the flags are read (applySSLSubopt,
// exit 1 like memcached's other -o errors); the files are read after
// all other settings have been checked (finishSecurity), in memcached's
// order: TLS certificates, then the SASL password file, then -Y's file.

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"strings"

	"github.com/vbcache/vbcache/internal/admin"
	"github.com/vbcache/vbcache/internal/sasl"
	"github.com/vbcache/vbcache/internal/server"
	"github.com/vbcache/vbcache/internal/tlsconf"
)

// saslPWDBEnv names the file of SASL credentials. memcached reads it only
// when built with --enable-sasl-pwdb, and otherwise uses Cyrus SASL's
// sasldb; vbcache has no sasldb, so -S requires it.
const saslPWDBEnv = "MEMCACHED_SASL_PWDB"

// applySSLSubopt applies one -o ssl_* item; it reports whether key was
// one of them.
func (o *Options) applySSLSubopt(key, val string, hasVal bool) (bool, error) {
	t := &o.tlsOpts
	missing := func() error {
		if hasVal {
			return nil
		}
		return fail(ExitFailure, "Missing %s argument", key)
	}
	number := func() (int64, error) {
		n, ok := parseInt(val)
		if !ok {
			return 0, fail(ExitFailure, "could not parse argument to %s", key)
		}
		return n, nil
	}
	switch key {
	case "ssl_chain_cert", "ssl_key", "ssl_ca_cert", "ssl_ciphers":
		if err := missing(); err != nil {
			return true, err
		}
		switch key {
		case "ssl_chain_cert":
			t.ChainCert = val
		case "ssl_key":
			t.Key = val
		case "ssl_ca_cert":
			t.CACert = val
		default:
			t.Ciphers = val
		}
	case "ssl_keyformat":
		if err := missing(); err != nil {
			return true, err
		}
		// memcached takes OpenSSL's numbers; its -h names the formats.
		switch strings.ToUpper(strings.TrimSpace(val)) {
		case "PEM":
			t.KeyFormat = tlsconf.KeyFormatPEM
			return true, nil
		case "DER":
			t.KeyFormat = tlsconf.KeyFormatDER
			return true, nil
		}
		n, err := number()
		if err != nil {
			return true, err
		}
		if n < 0 || n > 255 {
			n = 255 // refused by tlsconf when the key is loaded, as by OpenSSL
		}
		t.KeyFormat = tlsconf.KeyFormat(n)
	case "ssl_verify_mode":
		if err := missing(); err != nil {
			return true, err
		}
		n, err := number()
		if err != nil {
			return true, err
		}
		if n < 0 || n > 3 {
			return true, fail(ExitFailure, "Invalid ssl_verify_mode. Use help to see valid options.")
		}
		t.VerifyMode = tlsconf.VerifyMode(n)
	case "ssl_min_version":
		if err := missing(); err != nil {
			return true, err
		}
		v, err := parseMinVersion(val)
		if err != nil {
			return true, err
		}
		t.MinVersion = v
	case "ssl_wbuf_size":
		if err := missing(); err != nil {
			return true, err
		}
		n, err := strconv.ParseUint(strings.TrimSpace(val), 10, 32)
		if err != nil {
			return true, fail(ExitFailure, "could not parse argument to %s", key)
		}
		t.WBufSize = int(n)
	case "ssl_session_cache":
		// A bare flag in memcached, which ignores any value; vbcache
		// also honours an explicit no/off/0/false.
		switch strings.ToLower(val) {
		case "no", "off", "0", "false":
			t.SessionCache = false
		default:
			t.SessionCache = true
		}
	case "ssl_kernel_tls":
		t.KernelTLS = true
	default:
		return false, nil
	}
	return true, nil
}

// parseMinVersion reads ssl_min_version: memcached's 0–3, or (vbcache's
// addition) the names its -h shows, tlsv1.0 to tlsv1.3.
func parseMinVersion(val string) (uint16, error) {
	versions := []uint16{tls.VersionTLS10, tls.VersionTLS11, tls.VersionTLS12, tls.VersionTLS13}
	switch strings.ToLower(strings.TrimSpace(val)) {
	case "tlsv1.0", "tlsv1":
		return tls.VersionTLS10, nil
	case "tlsv1.1":
		return tls.VersionTLS11, nil
	case "tlsv1.2":
		return tls.VersionTLS12, nil
	case "tlsv1.3":
		return tls.VersionTLS13, nil
	}
	n, ok := parseInt(val)
	if !ok {
		return 0, fail(ExitFailure, "could not parse argument to ssl_min_version")
	}
	if n < 0 || n >= int64(len(versions)) {
		return 0, fail(ExitFailure, "Invalid ssl_min_version. Use help to see valid options.")
	}
	return versions[n], nil
}

// checkSASLProtocol is memcached's rule that SASL is binary-only: -S
// selects -B binary unless -B was given, and refuses any other -B.
func (o *Options) checkSASLProtocol() error {
	c := &o.Config
	if !c.SASL {
		return nil
	}
	if !o.protoSet {
		c.Protocol = server.ProtoBinary
		return nil
	}
	if c.Protocol != server.ProtoBinary {
		return fail(ExitUsage, "ERROR: You cannot allow the ASCII protocol while using SASL.")
	}
	return nil
}

// checkAuthFileProtocol is memcached's rule that ascii tokens (-Y) are
// text-only: -Y selects -B ascii unless -B was given, and refuses any
// other -B.
func (o *Options) checkAuthFileProtocol() error {
	c := &o.Config
	if o.authFile == "" {
		return nil
	}
	if !o.protoSet {
		c.Protocol = server.ProtoASCII
		return nil
	}
	if c.Protocol != server.ProtoASCII {
		return fail(ExitUsage, "ERROR: You cannot allow the BINARY protocol while using ascii authentication tokens.")
	}
	return nil
}

// finishSecurity reads the files -Z, -S and -Y name, once every other
// setting has been checked.
func (o *Options) finishSecurity() error {
	c := &o.Config
	if o.tlsEnabled {
		if c.PortSet && c.Port == 0 {
			return fail(ExitUsage, "ERROR: You cannot enable SSL without a TCP port.")
		}
		opts := o.tlsOpts
		opts.Warnf = func(format string, args ...any) {
			o.Warnings = append(o.Warnings, "WARNING: "+fmt.Sprintf(format, args...))
		}
		r, err := tlsconf.New(opts)
		if err != nil {
			return fail(ExitUsage, "%v", err)
		}
		o.tlsReloader = r
		settings := o.tlsOpts
		settings.Warnf = nil
		c.TLSSettings = &settings
		c.TLS = r.Config()
		c.TLSReload = r.Reload
		if c.VBuckets > 0 {
			// A cluster node whose listeners speak TLS dials its
			// peers, which speak it too, with TLS.
			pc, err := r.ClientConfig()
			if err != nil {
				return fail(ExitUsage, "vbcache: -Z in cluster mode: %v", err)
			}
			c.PeerTLS = pc
		}
	}
	if c.SASL {
		if o.saslPWDB == "" {
			return fail(ExitFailure, "vbcache: -S needs %s to name a user:password file", saslPWDBEnv)
		}
		creds, err := loadPasswordFile(o.saslPWDB)
		if err != nil {
			return credentialError(err, "vbcache: -S: cannot open "+saslPWDBEnv+" file [%s]: %v", o.saslPWDB)
		}
		c.SASLPasswords = creds
	}
	if o.clusterAuth != "" {
		if c.VBuckets == 0 {
			return fail(ExitUsage, "vbcache: --cluster-auth is for cluster mode (--vbuckets)")
		}
		cr, err := admin.LoadCredentials(o.clusterAuth)
		if err != nil {
			return credentialError(err, "vbcache: --cluster-auth: cannot open [%s]: %v", o.clusterAuth)
		}
		c.ClusterAuth = cr
	}
	if c.VBuckets > 0 && c.ClusterAuth == nil && !c.InsecureCluster {
		o.Warnings = append(o.Warnings, "vbcache: cluster mode without --cluster-auth: every cluster-control request is refused (a manager cannot manage this node); give it --cluster-auth FILE (see vbcache ctl init-security), or --insecure-cluster")
	}
	if c.VBuckets > 0 && c.InsecureCluster {
		o.Warnings = append(o.Warnings, "WARNING: --insecure-cluster: anyone who can reach this node may change its vbuckets, its map and its leases, and stream its data")
	}
	if o.authFile != "" {
		creds, err := loadAuthFile(o.authFile)
		if err != nil {
			return credentialError(err, "Could not open authfile [%s] for reading, error %v", o.authFile)
		}
		c.AuthTokens = creds
		c.AuthFile = o.authFile
	}
	return nil
}

// ReloadLogins re-reads the credential files the node started with (the
// MEMCACHED_SASL_PWDB file under -S, -Y's file, --cluster-auth's), for
// Server.SetLogins: what SIGHUP does. A file the node did not start with
// stays nil.
func (o *Options) ReloadLogins() (pwdb, tokens *sasl.Passwords, adm *admin.Credentials, err error) {
	if o.Config.SASL {
		if pwdb, err = loadPasswordFile(o.saslPWDB); err != nil {
			return nil, nil, nil, fmt.Errorf("%s: %w", saslPWDBEnv, err)
		}
	}
	if o.authFile != "" {
		if tokens, err = loadAuthFile(o.authFile); err != nil {
			return nil, nil, nil, fmt.Errorf("-Y: %w", err)
		}
	}
	if o.clusterAuth != "" && o.Config.VBuckets > 0 {
		if adm, err = admin.LoadCredentials(o.clusterAuth); err != nil {
			return nil, nil, nil, fmt.Errorf("--cluster-auth: %w", err)
		}
	}
	return pwdb, tokens, adm, nil
}

// Reloads reports whether the node has anything for SIGHUP to reload:
// credential files or -Z's certificates.
func (o *Options) Reloads() bool {
	return o.Config.SASL || o.authFile != "" || (o.clusterAuth != "" && o.Config.VBuckets > 0) || o.tlsReloader != nil
}

// The credential loaders, as variables so that a test could stand in
// for them; both read "user:password" lines.
var (
	loadPasswordFile = sasl.LoadPasswordFile
	loadAuthFile     = sasl.LoadAuthFile
)

// credentialError words a failure to load a credential file: openFormat
// (with the path and the system's reason) when the file cannot be read,
// as memcached words it for -Y, else the loader's own description of the
// bad line. Both exit 1, as memcached does.
func credentialError(err error, openFormat, path string) error {
	var pe *fs.PathError
	if errors.As(err, &pe) && !errors.Is(err, sasl.ErrCredentialFile) {
		return fail(ExitFailure, openFormat, path, pe.Err)
	}
	msg := strings.TrimPrefix(err.Error(), sasl.ErrCredentialFile.Error()+": ")
	return fail(ExitFailure, "vbcache: %s", msg)
}
