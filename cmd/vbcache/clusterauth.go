package main

import (
	"crypto/tls"
	"flag"
	"os"

	"github.com/vbcache/vbcache/internal/admin"
	"github.com/vbcache/vbcache/internal/tlsconf"
)

// clusterAuthFlags are how a process that sends nodes control requests
// (ctl, movecheck, the manager) reaches them as the cluster
// administrator: --cluster-auth's user:password file for the SCRAM
// login, and, for nodes whose listeners speak TLS (-Z), --tls-ca (the
// cluster's CA, which a node's certificate must chain to) with an
// optional client certificate, --tls-cert and --tls-key (init-security's
// admin.pem or node.pem). A node that asks for client certificates
// (ssl_verify_mode) gives the admin role to a certificate whose CN is the
// administrator's user name, so admin.pem alone is a login.
type clusterAuthFlags struct {
	file, ca, cert, key *string
}

// addClusterAuthFlags registers the flags on fs. With env, their defaults
// come from $VBCACHE_CLUSTER_AUTH, $VBCACHE_TLS_CA, $VBCACHE_TLS_CERT and
// $VBCACHE_TLS_KEY, as an operator's shell sets them once for ctl.
func addClusterAuthFlags(fs *flag.FlagSet, env bool) clusterAuthFlags {
	def := func(name string) string {
		if env {
			return os.Getenv(name)
		}
		return ""
	}
	envNote := func(name string) string {
		if env {
			return " (default $" + name + ")"
		}
		return ""
	}
	return clusterAuthFlags{
		file: fs.String("cluster-auth", def("VBCACHE_CLUSTER_AUTH"),
			"the cluster administrator's user:password file (ctl init-security's admin.pwdb)"+envNote("VBCACHE_CLUSTER_AUTH")+"; none: for nodes run with --insecure-cluster"),
		ca: fs.String("tls-ca", def("VBCACHE_TLS_CA"),
			"dial nodes over TLS, verifying them against this CA file (ctl init-security's ca.pem)"+envNote("VBCACHE_TLS_CA")),
		cert: fs.String("tls-cert", def("VBCACHE_TLS_CERT"),
			"with --tls-ca: the client certificate to present (admin.pem or node.pem)"+envNote("VBCACHE_TLS_CERT")),
		key: fs.String("tls-key", def("VBCACHE_TLS_KEY"),
			"with --tls-cert: its private key"+envNote("VBCACHE_TLS_KEY")),
	}
}

// credentials loads what the flags name; nil when they name nothing.
func (f clusterAuthFlags) credentials() (*admin.Credentials, error) {
	var cr *admin.Credentials
	if *f.file != "" {
		var err error
		if cr, err = admin.LoadCredentials(*f.file); err != nil {
			return nil, err
		}
	}
	tc, err := f.tlsConfig()
	if err != nil || tc == nil {
		return cr, err
	}
	if cr == nil {
		cr = &admin.Credentials{}
	}
	cr.TLS = tc
	return cr, nil
}

// tlsConfig is the client TLS configuration the flags ask for; nil
// without --tls-ca.
func (f clusterAuthFlags) tlsConfig() (*tls.Config, error) {
	if *f.ca == "" {
		if *f.cert != "" || *f.key != "" {
			return tlsconf.LoadClient("", *f.cert, *f.key) // says that --tls-ca is needed
		}
		return nil, nil
	}
	return tlsconf.LoadClient(*f.ca, *f.cert, *f.key)
}
