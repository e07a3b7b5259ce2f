package main

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/vbcache/vbcache/internal/tlsconf"
)

// "vbcache ctl init-security" makes what a secured cluster's processes
// read: a CA, a certificate for the cluster's processes that it signed
// (server and client use: a node serves with it and streams from its
// peers with it), a client certificate for the administrator, and the
// administrator's SASL password (memcached's password-file format, the
// file MEMCACHED_SASL_PWDB names). Every file is written 0600 in a
// directory made 0700, and nothing is overwritten: a second run into
// the same directory fails, since a new CA would make every certificate
// already handed out worthless.

func init() {
	n := len(ctlCommands)
	ctlCommands = append(ctlCommands[:n-1:n-1], ctlCommand{"init-security",
		"--dir DIR [--hosts h1,h2,...] [--days N]",
		"create a cluster's CA, its processes' and its admin's certificates, and the admin's SASL password",
		ctlInitSecurity}, ctlCommands[n-1])
}

// The files init-security writes, by their names in --dir.
const (
	secCA        = "ca.pem"
	secCAKey     = "ca-key.pem"
	secNode      = "node.pem"
	secNodeKey   = "node-key.pem"
	secAdmin     = "admin.pem"
	secAdminKey  = "admin-key.pem"
	secAdminPWDB = "admin.pwdb"
	secAdminUser = "admin"
)

func ctlInitSecurity(args []string, stdout, stderr io.Writer) int {
	fl := ctlFlags("init-security", "--dir DIR [--hosts h1,h2,...] [--days N]", stderr)
	dir := fl.String("dir", "", "the directory to write into (made if missing)")
	hosts := fl.String("hosts", "localhost,127.0.0.1,::1", "the DNS names and IP addresses the processes' certificate is valid for")
	days := fl.Int("days", 825, "how long the CA and the certificates are valid, in days")
	if st, done := parseCtl(fl, args, stderr); done {
		return st
	}
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "vbcache ctl init-security: "+format+"\n", a...)
		return 1
	}
	if *dir == "" {
		fmt.Fprintln(stderr, "vbcache ctl init-security: --dir is required")
		return 2
	}
	if *days < 1 {
		fmt.Fprintln(stderr, "vbcache ctl init-security: --days must be at least 1")
		return 2
	}
	var hostList []string
	for _, h := range strings.Split(*hosts, ",") {
		if h = strings.TrimSpace(h); h != "" {
			hostList = append(hostList, h)
		}
	}
	if len(hostList) == 0 {
		fmt.Fprintln(stderr, "vbcache ctl init-security: --hosts names no host")
		return 2
	}
	notAfter := time.Now().Add(time.Duration(*days) * 24 * time.Hour)
	files, err := writeSecurity(*dir, hostList, notAfter)
	if err != nil {
		return fail("%v", err)
	}
	fmt.Fprintf(stdout, "wrote into %s (each file 0600), valid until %s:\n", *dir, notAfter.UTC().Format(time.DateOnly))
	for _, f := range files {
		fmt.Fprintf(stdout, "  %-14s %s\n", f.name, f.what)
	}
	d := *dir
	f := func(name string) string { return filepath.Join(d, name) }
	fmt.Fprintf(stdout, "a node serving TLS that requires a certificate from this CA:\n"+
		"  vbcache server -Z -o ssl_chain_cert=%s,ssl_key=%s,ssl_ca_cert=%s,ssl_verify_mode=2\n",
		f(secNode), f(secNodeKey), f(secCA))
	fmt.Fprintf(stdout, "a cluster with every link on TLS and the control plane logged in:\n"+
		"  vbcache server --vbuckets 1024 --cluster-auth %[4]s -Z -o ssl_chain_cert=%[1]s,ssl_key=%[2]s,ssl_ca_cert=%[3]s,ssl_verify_mode=1 ...\n"+
		"  vbcache manager --cluster-auth %[4]s --tls-ca %[3]s --tls-cert %[1]s --tls-key %[2]s --api-tls-cert %[1]s --api-tls-key %[2]s ...\n"+
		"  vbcache proxy --manager https://MANAGER --tls-ca %[3]s --listen-tls-cert %[1]s --listen-tls-key %[2]s ...   (add --auth FILE for nodes run with -S)\n"+
		"  export VBCACHE_CLUSTER_AUTH=%[4]s VBCACHE_TLS_CA=%[3]s VBCACHE_TLS_CERT=%[5]s VBCACHE_TLS_KEY=%[6]s   (for vbcache ctl)\n",
		f(secNode), f(secNodeKey), f(secCA), f(secAdminPWDB), f(secAdmin), f(secAdminKey))
	return 0
}

// newAdminPWDB is a password file holding the cluster administrator's one
// entry, with a new random 32-character password (192 bits).
func newAdminPWDB() []byte {
	pw := make([]byte, 24)
	rand.Read(pw) // never fails (crypto/rand's Read panics rather than return an error)
	return []byte(secAdminUser + ":" + base64.RawURLEncoding.EncodeToString(pw) + "\n")
}

// secFile is one file init-security writes.
type secFile struct {
	name string
	data []byte
	what string
}

// writeSecurity makes a cluster's security files in dir (made 0700 if
// missing; each file 0600), the processes' certificate valid for hosts,
// everything until notAfter. It replaces no file.
func writeSecurity(dir string, hostList []string, notAfter time.Time) ([]secFile, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	for _, name := range []string{secCA, secCAKey, secNode, secNodeKey, secAdmin, secAdminKey, secAdminPWDB} {
		if _, err := os.Lstat(filepath.Join(dir, name)); err == nil {
			return nil, fmt.Errorf("%s already exists: not replacing a cluster's security files (choose another --dir)", filepath.Join(dir, name))
		} else if !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
	}

	ca, err := tlsconf.NewCA("vbcache cluster CA", notAfter)
	if err != nil {
		return nil, fmt.Errorf("making the CA: %w", err)
	}
	caKey, err := ca.KeyPEM()
	if err != nil {
		return nil, fmt.Errorf("making the CA: %w", err)
	}
	node, nodeKey, err := ca.Issue(tlsconf.Leaf{Name: "vbcache node", Hosts: hostList, Server: true, Client: true, NotAfter: notAfter})
	if err != nil {
		return nil, fmt.Errorf("making the processes' certificate: %w", err)
	}
	admin, adminKey, err := ca.Issue(tlsconf.Leaf{Name: secAdminUser, Client: true, NotAfter: notAfter})
	if err != nil {
		return nil, fmt.Errorf("making the admin's certificate: %w", err)
	}
	pwdb := newAdminPWDB()

	files := []secFile{
		{secCA, ca.CertPEM(), "the CA's certificate (ssl_ca_cert of every process)"},
		{secCAKey, caKey, "the CA's key: keep it offline once certificates are issued"},
		{secNode, node, "the processes' certificate (ssl_chain_cert), for " + strings.Join(hostList, ", ")},
		{secNodeKey, nodeKey, "its key (ssl_key)"},
		{secAdmin, admin, "the admin's client certificate (CN=" + secAdminUser + ")"},
		{secAdminKey, adminKey, "its key"},
		{secAdminPWDB, pwdb, "the admin's SASL password (MEMCACHED_SASL_PWDB format)"},
	}
	for _, f := range files {
		// O_EXCL: a file that appeared since the check is not replaced.
		w, err := os.OpenFile(filepath.Join(dir, f.name), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return nil, err
		}
		_, err = w.Write(f.data)
		if cerr := w.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return nil, err
		}
	}
	return files, nil
}
