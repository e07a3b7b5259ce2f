package tlsconf

import (
	"crypto/tls"
	"fmt"
	"strings"
)

// openSSLNames maps OpenSSL's names of the TLS 1.0–1.2 suites that Go
// implements to their IANA names (which Go uses).
var openSSLNames = map[string]string{
	"ECDHE-ECDSA-AES128-GCM-SHA256": "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
	"ECDHE-RSA-AES128-GCM-SHA256":   "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
	"ECDHE-ECDSA-AES256-GCM-SHA384": "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
	"ECDHE-RSA-AES256-GCM-SHA384":   "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
	"ECDHE-ECDSA-CHACHA20-POLY1305": "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
	"ECDHE-RSA-CHACHA20-POLY1305":   "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
	"ECDHE-ECDSA-AES128-SHA":        "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA",
	"ECDHE-RSA-AES128-SHA":          "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA",
	"ECDHE-ECDSA-AES256-SHA":        "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA",
	"ECDHE-RSA-AES256-SHA":          "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA",
	"ECDHE-ECDSA-AES128-SHA256":     "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256",
	"ECDHE-RSA-AES128-SHA256":       "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256",
	"AES128-GCM-SHA256":             "TLS_RSA_WITH_AES_128_GCM_SHA256",
	"AES256-GCM-SHA384":             "TLS_RSA_WITH_AES_256_GCM_SHA384",
	"AES128-SHA":                    "TLS_RSA_WITH_AES_128_CBC_SHA",
	"AES256-SHA":                    "TLS_RSA_WITH_AES_256_CBC_SHA",
	"AES128-SHA256":                 "TLS_RSA_WITH_AES_128_CBC_SHA256",
	"ECDHE-RSA-DES-CBC3-SHA":        "TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA",
	"DES-CBC3-SHA":                  "TLS_RSA_WITH_3DES_EDE_CBC_SHA",
}

// openSSLKeywords are the words of OpenSSL's cipher-list language that
// select groups of suites (see ciphers(1)); "+" joins them.
var openSSLKeywords = map[string]bool{}

func init() {
	for _, k := range strings.Fields(`DEFAULT COMPLEMENTOFDEFAULT ALL COMPLEMENTOFALL HIGH MEDIUM LOW
		eNULL NULL aNULL kRSA aRSA RSA kDHE kEDH DH DHE EDH ADH kDHr kDHd kDH kEECDH kECDHE ECDH ECDHE
		EECDH AECDH aDSS DSS aDH aECDSA ECDSA TLSv1.2 TLSv1.0 TLSv1 SSLv3 AES128 AES256 AES AESGCM AESCCM
		AESCCM8 ARIA128 ARIA256 ARIA CAMELLIA128 CAMELLIA256 CAMELLIA CHACHA20 3DES DES RC4 RC2 IDEA SEED
		MD5 SHA1 SHA SHA256 SHA384 aGOST aGOST01 kGOST GOST94 GOST89MAC kPSK kECDHEPSK kDHEPSK kRSAPSK
		aPSK PSK DHEPSK ECDHEPSK RSAPSK aSRP SRP kSRP SUITEB128 SUITEB128ONLY SUITEB192 CBC`) {
		openSSLKeywords[k] = true
	}
}

// parseCiphers reads an ssl_ciphers list (see the package comment). It
// returns nil for "keep Go's defaults".
func parseCiphers(list string, warnf func(string, ...any)) ([]uint16, error) {
	if list == "" {
		return nil, nil
	}
	byName := map[string]*tls.CipherSuite{}
	for _, s := range tls.CipherSuites() {
		byName[s.Name] = s
	}
	var (
		suites                       []uint16
		keywords, tls13, unsupported []string
		recognised                   bool
	)
	for _, item := range strings.FieldsFunc(list, func(r rune) bool {
		return r == ':' || r == ',' || r == ' ' || r == ';'
	}) {
		name := item
		if iana, ok := openSSLNames[item]; ok {
			name = iana
		}
		if s, ok := byName[name]; ok {
			recognised = true
			if len(s.SupportedVersions) == 1 && s.SupportedVersions[0] == tls.VersionTLS13 {
				tls13 = append(tls13, item)
				continue
			}
			suites = append(suites, s.ID)
			continue
		}
		if _, ok := openSSLNames[item]; ok { // known to OpenSSL, not offered by Go
			recognised = true
			unsupported = append(unsupported, item)
			continue
		}
		if isKeywordExpr(item) {
			recognised = true
			keywords = append(keywords, item)
			continue
		}
		if strings.HasPrefix(item, "TLS_") || strings.Contains(item, "-") {
			// A suite name this package does not know (DHE-RSA-…,
			// CAMELLIA, …): OpenSSL skips names it lacks too.
			unsupported = append(unsupported, item)
		}
	}
	if !recognised {
		return nil, fmt.Errorf("Error setting the provided cipher(s): %s", list)
	}
	if len(unsupported) > 0 {
		warnf("ssl_ciphers: not available in Go, ignored: %s", strings.Join(unsupported, ":"))
	}
	if len(tls13) > 0 {
		warnf("ssl_ciphers: TLS 1.3 suites cannot be chosen in Go, ignored: %s", strings.Join(tls13, ":"))
	}
	if len(keywords) > 0 {
		warnf("ssl_ciphers: OpenSSL cipher expressions are not understood, using Go's default suites "+
			"(ignored: %s)", strings.Join(keywords, ":"))
		return nil, nil
	}
	if len(suites) == 0 && len(tls13) == 0 {
		return nil, fmt.Errorf("Error setting the provided cipher(s): %s", list)
	}
	return suites, nil
}

// isKeywordExpr reports whether item is OpenSSL cipher-list syntax built
// from keywords: "HIGH", "!aNULL", "-RC4", "+SHA", "ECDHE+AESGCM",
// "@STRENGTH", "@SECLEVEL=2".
func isKeywordExpr(item string) bool {
	if strings.HasPrefix(item, "@") {
		return true
	}
	item = strings.TrimLeft(item, "!-+")
	if item == "" {
		return false
	}
	for _, w := range strings.Split(item, "+") {
		if !openSSLKeywords[w] {
			if _, ok := openSSLNames[w]; !ok {
				return false
			}
		}
	}
	return true
}
