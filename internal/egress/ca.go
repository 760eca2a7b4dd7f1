package egress

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// The CA that jails of runs with secrets trust. The proxy terminates TLS
// only for the hosts bound to a secret the run asked for, presenting a
// certificate for that host that this CA signs; the jail trusts it through
// a bundle of the system's roots plus this CA (Bundle). Its key stays in
// the daemon: in a file of mode 0600 in a directory of mode 0700 under the
// state directory (or the operator's own files), never in a jail.

// File names of the daemon's own CA, in its directory.
const (
	CACertFile = "ca.pem"
	CAKeyFile  = "ca-key.pem"
)

// Lifetimes of the certificates.
const (
	// caLifetime is the daemon's own CA's; an expired one is made anew.
	caLifetime = 10 * 365 * 24 * time.Hour
	// leafLifetime is a host certificate's; one with less than
	// leafRenew left is made anew.
	leafLifetime = 7 * 24 * time.Hour
	leafRenew    = 24 * time.Hour
	// maxLeaves bounds the cache of host certificates.
	maxLeaves = 1024
)

// CA signs the certificates of the hosts whose TLS the proxy terminates.
// Its methods are safe for concurrent use.
type CA struct {
	cert    *x509.Certificate
	certPEM []byte
	key     crypto.Signer

	mu     sync.Mutex
	leaves map[string]*tls.Certificate // by host name or address
}

// LoadCA reads the operator's CA (--egress-ca-cert, --egress-ca-key): a
// CA certificate and its private key, in PEM. The key's file must be
// readable by its owner alone.
func LoadCA(certFile, keyFile string) (*CA, error) {
	st, err := os.Stat(keyFile)
	if err != nil {
		return nil, fmt.Errorf("--egress-ca-key: %w", err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("--egress-ca-key %s has mode %#o: a CA's key must be readable by its owner alone (chmod 600)", keyFile, st.Mode().Perm())
	}
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return nil, fmt.Errorf("--egress-ca-cert: %w", err)
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, fmt.Errorf("--egress-ca-key: %w", err)
	}
	ca, err := parseCA(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("--egress-ca-cert %s and --egress-ca-key %s: %w", certFile, keyFile, err)
	}
	return ca, nil
}

// EnsureCA returns the daemon's own CA in dir, making dir (mode 0700) and
// the CA when there is none yet, or when the one there is unusable
// (unreadable, expired, its key not its certificate's). made says a new
// one was made.
func EnsureCA(dir string) (ca *CA, made bool, err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, false, fmt.Errorf("egress CA: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, false, fmt.Errorf("egress CA: %w", err)
	}
	certPath, keyPath := filepath.Join(dir, CACertFile), filepath.Join(dir, CAKeyFile)
	certPEM, cerr := os.ReadFile(certPath)
	keyPEM, kerr := os.ReadFile(keyPath)
	if cerr == nil && kerr == nil {
		if ca, err := parseCA(certPEM, keyPEM); err == nil && time.Now().Add(leafLifetime).Before(ca.cert.NotAfter) {
			// The key's mode is ours to keep.
			if err := os.Chmod(keyPath, 0o600); err != nil {
				return nil, false, fmt.Errorf("egress CA: %w", err)
			}
			return ca, false, nil
		}
	}
	certPEM, keyPEM, err = newCA()
	if err != nil {
		return nil, false, fmt.Errorf("egress CA: %w", err)
	}
	// The key first: a certificate is never there without its key.
	if err := writeFile(keyPath, keyPEM, 0o600); err != nil {
		return nil, false, fmt.Errorf("egress CA: %w", err)
	}
	if err := writeFile(certPath, certPEM, 0o644); err != nil {
		return nil, false, fmt.Errorf("egress CA: %w", err)
	}
	ca, err = parseCA(certPEM, keyPEM)
	if err != nil {
		return nil, false, fmt.Errorf("egress CA: %w", err)
	}
	return ca, true, nil
}

// writeFile replaces path with data atomically, the new file made with
// mode from the start.
func writeFile(path string, data []byte, mode os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".new-")
	if err != nil {
		return err
	}
	tmp := f.Name()
	err = f.Chmod(mode) // CreateTemp makes it 0600: never wider meanwhile
	if err == nil {
		_, err = f.Write(data)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}

// newCA makes a CA certificate and key, in PEM.
func newCA() (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, nil, err
	}
	host, _ := os.Hostname()
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject: pkix.Name{
			Organization: []string{"cellblock"},
			CommonName:   "cellblock egress CA (" + host + ")",
		},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(caLifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), nil
}

// parseCA reads a CA certificate and its key. Its errors never quote the
// key.
func parseCA(certPEM, keyPEM []byte) (*CA, error) {
	cb, _ := pem.Decode(certPEM)
	if cb == nil || cb.Type != "CERTIFICATE" {
		return nil, errors.New("the certificate is not PEM (BEGIN CERTIFICATE)")
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("the certificate: %w", err)
	}
	if !cert.IsCA || !cert.BasicConstraintsValid || (cert.KeyUsage != 0 && cert.KeyUsage&x509.KeyUsageCertSign == 0) {
		return nil, errors.New("the certificate is no CA (basic constraints CA:TRUE and key usage keyCertSign)")
	}
	kb, _ := pem.Decode(keyPEM)
	if kb == nil {
		return nil, errors.New("the key is not PEM")
	}
	var key any
	switch kb.Type {
	case "PRIVATE KEY":
		key, err = x509.ParsePKCS8PrivateKey(kb.Bytes)
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(kb.Bytes)
	case "RSA PRIVATE KEY":
		key, err = x509.ParsePKCS1PrivateKey(kb.Bytes)
	default:
		return nil, fmt.Errorf("the key is a PEM %q block; want PRIVATE KEY, EC PRIVATE KEY or RSA PRIVATE KEY", kb.Type)
	}
	if err != nil {
		return nil, errors.New("the key cannot be parsed")
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, errors.New("the key cannot sign")
	}
	type equaler interface{ Equal(crypto.PublicKey) bool }
	if pub, ok := signer.Public().(equaler); !ok || !pub.Equal(cert.PublicKey) {
		return nil, errors.New("the key is not the certificate's")
	}
	return &CA{cert: cert, certPEM: pem.EncodeToMemory(cb), key: signer, leaves: map[string]*tls.Certificate{}}, nil
}

// PEM is the CA's certificate.
func (c *CA) PEM() []byte { return bytes.Clone(c.certPEM) }

// leaf returns the certificate of a host the proxy terminates TLS for: a
// name, or an address when the program named the host by its address.
// Made on first use and cached.
func (c *CA) leaf(name string, addr netip.Addr) (*tls.Certificate, error) {
	k := name
	if addr.IsValid() {
		k = addr.String()
	}
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if l := c.leaves[k]; l != nil && now.Add(leafRenew).Before(l.Leaf.NotAfter) {
		return l, nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, err
	}
	notAfter := now.Add(leafLifetime)
	if c.cert.NotAfter.Before(notAfter) {
		notAfter = c.cert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: k},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
	}
	if addr.IsValid() {
		tmpl.IPAddresses = []net.IP{addr.AsSlice()}
	} else {
		tmpl.DNSNames = []string{name}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &key.PublicKey, c.key)
	if err != nil {
		return nil, err
	}
	parsed, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	l := &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: parsed}
	if len(c.leaves) >= maxLeaves {
		for old := range c.leaves { // any one: the cache only saves work
			delete(c.leaves, old)
			break
		}
	}
	c.leaves[k] = l
	return l, nil
}

func randomSerial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
}

// systemBundles are where Linux distributions keep their CA bundle, in
// the order Go's crypto/x509 looks.
var systemBundles = []string{
	"/etc/ssl/certs/ca-certificates.crt",                // Debian, Ubuntu, Gentoo, Arch
	"/etc/pki/tls/certs/ca-bundle.crt",                  // Fedora, RHEL 6
	"/etc/ssl/ca-bundle.pem",                            // openSUSE
	"/etc/pki/tls/cacert.pem",                           // OpenELEC
	"/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem", // CentOS, RHEL 7
	"/etc/ssl/cert.pem",                                 // Alpine
}

// Bundle is what a jail of a run with secrets trusts: the host's CA
// bundle (the same roots as the rootfs's) followed by ca's certificate.
// It returns the host bundle's path, "" when the host has none (the
// bundle then holds ca alone).
func Bundle(ca *CA) ([]byte, string) {
	for _, p := range systemBundles {
		b, err := os.ReadFile(p)
		if err == nil && len(b) > 0 {
			if b[len(b)-1] != '\n' {
				b = append(b, '\n')
			}
			return append(b, ca.certPEM...), p
		}
	}
	return ca.PEM(), ""
}

// UpstreamRoots are the roots the proxy verifies the hosts it terminates
// TLS for against: the host's trust store plus the certificates of files
// (--egress-trust, PEM), each of which must hold at least one.
func UpstreamRoots(files []string) (*x509.CertPool, error) {
	pool, err := x509.SystemCertPool()
	if err != nil || pool == nil {
		pool = x509.NewCertPool()
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("--egress-trust: %w", err)
		}
		if !pool.AppendCertsFromPEM(b) {
			return nil, fmt.Errorf("--egress-trust %s holds no PEM certificate", f)
		}
	}
	return pool, nil
}
