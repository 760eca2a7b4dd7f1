package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cellblock/cellblock/internal/api"
)

// networkClient is the program both sides run: n HTTPS GETs of a small
// page, one after another, each timed inside Python. "new" opens a
// connection per request (urllib.request.urlopen: through the proxy, a
// CONNECT and a TLS handshake each time); "kept" sends all n over one
// connection (http.client, one tunnel). It prints the seconds of each.
const networkClient = `
import http.client, json, os, ssl, sys, time, urllib.parse, urllib.request
port, n, mode, ca = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
# With a secret, the jail trusts the daemon's CA (SSL_CERT_FILE) and sends
# the placeholder as its token.
ctx = ssl.create_default_context(cafile=os.environ.get("SSL_CERT_FILE") or ca)
headers = {"Authorization": "Bearer " + os.environ["BENCH_TOKEN"]} if "BENCH_TOKEN" in os.environ else {}
times = []
if mode == "new":
    for i in range(n):
        t = time.perf_counter()
        urllib.request.urlopen(urllib.request.Request("https://localhost:%d/" % port, headers=headers), context=ctx, timeout=30).read()
        times.append(time.perf_counter() - t)
else:
    proxy = os.environ.get("HTTPS_PROXY")
    if proxy:
        p = urllib.parse.urlsplit(proxy)
        c = http.client.HTTPSConnection(p.hostname, p.port, context=ctx, timeout=30)
        c.set_tunnel("localhost", port)
    else:
        c = http.client.HTTPSConnection("localhost", port, context=ctx, timeout=30)
    c.request("GET", "/", headers=headers); c.getresponse().read()  # the connection, untimed
    for i in range(n):
        t = time.perf_counter()
        c.request("GET", "/", headers=headers)
        c.getresponse().read()
        times.append(time.perf_counter() - t)
print(json.dumps(times))
`

// networkBench reports the latency the egress proxy adds to an HTTPS
// request on loopback: the same Python program makes n requests to a TLS
// server of this process's on 127.0.0.1, on the host straight to the
// server (the rootfs's interpreter, bare), in a jail through its proxy's
// blind tunnel, and in a jail with a secret bound to the server, whose
// proxy terminates TLS and puts the token in each request; interleaved
// over rounds; medians of the requests.
func networkBench(bins, tmp, stateDir, rootfsDir, pythonInRootfs string, n int) error {
	const rounds = 5
	const token = "ghp_benchTOKEN0123456789abcdefghijklmnop"
	cert, caPEM, err := benchCert()
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	var injected atomic.Int64
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Authorization") == "Bearer "+token {
				injected.Add(1)
			}
			fmt.Fprint(w, "ok")
		}),
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}},
	}
	go srv.ServeTLS(ln, "", "")
	defer srv.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	ca := filepath.Join(tmp, "bench-ca.pem")
	if err := os.WriteFile(ca, []byte(caPEM), 0o644); err != nil {
		return err
	}
	tokenFile := filepath.Join(tmp, "bench-token")
	if err := os.WriteFile(tokenFile, []byte(token), 0o600); err != nil {
		return err
	}
	d, err := startDaemon(bins, tmp, "network", stateDir+"-network", filepath.Base(stateDir)+"-network",
		"--network-allow", fmt.Sprintf("localhost:%d", port), "--network-allow-private",
		"--secret", "BENCH_TOKEN="+tokenFile, "--secret-host", fmt.Sprintf("BENCH_TOKEN=localhost:%d", port), "--egress-trust", ca)
	if err != nil {
		return err
	}
	defer d.stop()

	host := func(mode string) ([]time.Duration, error) {
		cmd := exec.Command(filepath.Join(rootfsDir, pythonInRootfs), "-c", networkClient, fmt.Sprint(port), fmt.Sprint(n), mode, ca)
		cmd.Env = []string{"PATH=/usr/bin:/bin", "LANG=C.UTF-8", "PYTHONDONTWRITEBYTECODE=1"}
		out, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("host client: %v: %s", err, out)
		}
		return seconds(out)
	}
	jail := func(mode string, secret bool) ([]time.Duration, error) {
		if err := d.settle(); err != nil {
			return nil, err
		}
		code := fmt.Sprintf("import sys\nopen('/tmp/ca.pem', 'w').write(ca_pem)\nsys.argv = ['-c', %q, %q, %q, '/tmp/ca.pem']\n%s",
			fmt.Sprint(port), fmt.Sprint(n), mode, networkClient)
		caJSON, _ := json.Marshal(caPEM)
		req := &api.RunRequest{Code: code, Inputs: map[string]json.RawMessage{"ca_pem": caJSON},
			Network: &api.Network{Allow: []string{fmt.Sprintf("localhost:%d", port)}}, TimeoutMs: 120_000}
		if secret {
			req.Secrets = []string{"BENCH_TOKEN"}
		}
		res, err := d.Client.Run(context.Background(), req)
		if err != nil || res.Error != nil || res.ExitCode != 0 {
			return nil, fmt.Errorf("jail client: %v %+v %s", err, res.Error, res.Stderr)
		}
		return seconds([]byte(res.Stdout))
	}
	type side struct{ host, jail, secret []time.Duration }
	results := map[string]*side{"new": {}, "kept": {}}
	for r := 0; r < rounds; r++ {
		for _, mode := range []string{"new", "kept"} {
			h, err := host(mode)
			if err != nil {
				return err
			}
			j, err := jail(mode, false)
			if err != nil {
				return err
			}
			sj, err := jail(mode, true)
			if err != nil {
				return err
			}
			results[mode].host = append(results[mode].host, h...)
			results[mode].jail = append(results[mode].jail, j...)
			results[mode].secret = append(results[mode].secret, sj...)
		}
	}
	// Every request of the runs with the secret, and their untimed first
	// ones, carried the token; no other did.
	if want := int64(rounds * (2*n + 1)); injected.Load() != want {
		return fmt.Errorf("the server got the token %d times, want %d", injected.Load(), want)
	}
	fmt.Printf("\nnetwork: an HTTPS GET of a 2-byte page from a server on 127.0.0.1, the same Python on the host straight to it, in a jail through its proxy's blind tunnel, "+
		"and in a jail with a secret bound to the server (the proxy terminates TLS, puts the token in the Authorization header, filters the answer, and speaks TLS of its own to the server) "+
		"(%d rounds of %d requests, interleaved; medians of the requests, timed in Python):\n\n", rounds, n)
	fmt.Println("| request | host, direct | jail, blind tunnel | jail, secret injected | added by the tunnel | added by injection |")
	fmt.Println("|---|---|---|---|---|---|")
	for _, mode := range []struct{ key, name string }{
		{"new", "a new connection each (urllib: CONNECT, TLS handshake, GET)"},
		{"kept", "over one kept connection (http.client: GET only)"},
	} {
		s := results[mode.key]
		h, j, sj := median(s.host), median(s.jail), median(s.secret)
		fmt.Printf("| %s | %s | %s | %s | %s | %s |\n", mode.name, usMs(h), usMs(j), usMs(sj), usMs(j-h), usMs(sj-j))
	}
	return nil
}

// seconds reads the client's JSON list of seconds.
func seconds(out []byte) ([]time.Duration, error) {
	var s []float64
	if err := json.Unmarshal([]byte(strings.TrimSpace(string(out))), &s); err != nil {
		return nil, fmt.Errorf("client output %q: %w", out, err)
	}
	d := make([]time.Duration, len(s))
	for i, v := range s {
		d[i] = time.Duration(v * float64(time.Second))
	}
	return d, nil
}

func usMs(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d.Microseconds())/1000) }

// benchCert is a self-signed certificate for localhost, and its PEM.
func benchCert() (tls.Certificate, string, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, "", err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "cellblock bench"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		DNSNames: []string{"localhost"}, KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, "", err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return tls.Certificate{}, "", err
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	cert, err := tls.X509KeyPair(certPEM, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}))
	return cert, string(certPEM), err
}
