package tlsconf

import (
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestCAIssueAndLoad(t *testing.T) {
	caEnd := time.Now().Add(48 * time.Hour)
	ca, err := NewCA("test CA", caEnd)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := ca.Issue(Leaf{Name: "nothing", NotAfter: caEnd}); err == nil {
		t.Error("a certificate for neither a server nor a client was issued")
	}
	certPEM, keyPEM, err := ca.Issue(Leaf{Name: "n", Hosts: []string{"10.0.0.1", "n.example"}, Server: true, NotAfter: caEnd.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := pem.Decode(certPEM)
	leaf, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if leaf.NotAfter.After(ca.Cert.NotAfter) {
		t.Errorf("the leaf outlives its CA: %v > %v", leaf.NotAfter, ca.Cert.NotAfter)
	}
	if len(leaf.IPAddresses) != 1 || len(leaf.DNSNames) != 1 || leaf.DNSNames[0] != "n.example" {
		t.Errorf("SANs: %v %v", leaf.IPAddresses, leaf.DNSNames)
	}

	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	caKey, err := ca.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	caFile, caKeyFile := write("ca.pem", ca.CertPEM()), write("ca-key.pem", caKey)
	loaded, err := LoadCA(caFile, caKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	if !loaded.Cert.Equal(ca.Cert) {
		t.Error("LoadCA read another certificate")
	}
	other, _ := NewCA("other", caEnd)
	otherKey, _ := other.KeyPEM()
	for name, files := range map[string][2]string{
		"a leaf as the CA":  {write("leaf.pem", certPEM), write("leaf-key.pem", keyPEM)},
		"another CA's key":  {caFile, write("other-key.pem", otherKey)},
		"a key as the cert": {caKeyFile, caKeyFile},
		"a missing file":    {filepath.Join(dir, "nope.pem"), caKeyFile},
		"a cert as the key": {caFile, caFile},
	} {
		if _, err := LoadCA(files[0], files[1]); err == nil {
			t.Errorf("%s: LoadCA succeeded", name)
		} else if !strings.Contains(err.Error(), dir) && name != "a missing file" {
			t.Errorf("%s: %v does not name the file", name, err)
		}
	}
}
