package daemon

import (
	"context"
	"crypto/x509"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/cellblock/cellblock/internal/api"
	"github.com/cellblock/cellblock/internal/config"
	"github.com/cellblock/cellblock/internal/egress"
	"github.com/cellblock/cellblock/internal/metrics"
	"github.com/cellblock/cellblock/internal/secrets"
	"github.com/cellblock/cellblock/nsjail/layout"
)

// secretSetup is what the daemon's secrets need: their store, the CA the
// jails trust for the proxy's certificates, the roots the proxy trusts
// upstream, and the bundle the jails read.
type secretSetup struct {
	store  *secrets.Store
	ca     *egress.CA
	roots  *x509.CertPool
	bundle []byte
}

// openSecrets reads the declared secrets, after locking the daemon's
// memory away (secrets.Harden), and readies the egress CA: the
// operator's, or the daemon's own, made on first start. It returns nil
// when no secret is declared.
func openSecrets(cfg config.Config, stats *metrics.Metrics, log *slog.Logger) (*secretSetup, error) {
	if len(cfg.Secrets) == 0 {
		return nil, nil
	}
	if err := secrets.Harden(); err != nil {
		log.Warn("secrets: the daemon's memory is not protected as it should be", "err", err)
	}
	var decls []secrets.Decl
	for _, s := range cfg.Secrets {
		hosts, aerr := api.ParseNetPatterns("--secret-host", s.Hosts)
		if aerr != nil {
			return nil, aerr // Validate checked them
		}
		d := secrets.Decl{Name: s.Name, File: s.File, Hosts: hosts}
		for _, uid := range s.AllowUIDs {
			d.UIDs = append(d.UIDs, uint32(uid))
		}
		decls = append(decls, d)
	}
	store, err := secrets.Open(decls)
	if err != nil {
		return nil, fmt.Errorf("secrets: %w", err)
	}
	var ca *egress.CA
	caPath := cfg.EgressCACert
	if cfg.EgressCACert != "" {
		if ca, err = egress.LoadCA(cfg.EgressCACert, cfg.EgressCAKey); err != nil {
			return nil, err
		}
	} else {
		dir := filepath.Join(cfg.StateDir, config.EgressCADir)
		var made bool
		if ca, made, err = egress.EnsureCA(dir); err != nil {
			return nil, err
		}
		caPath = filepath.Join(dir, egress.CACertFile)
		if made {
			log.Info("made the egress CA that jails of runs with secrets trust", "cert", caPath)
		}
	}
	roots, err := egress.UpstreamRoots(cfg.EgressTrust)
	if err != nil {
		return nil, err
	}
	bundle, from := egress.Bundle(ca)
	if from == "" {
		log.Warn("secrets: the host has no CA bundle; jails of runs with secrets trust the egress CA alone", "looked_in", "/etc/ssl/certs and the like")
	}
	var names []string
	for _, si := range store.Info() {
		names = append(names, si.Name)
	}
	stats.DeclareSecrets(names)
	log.Info("secrets declared", "secrets", names, "egress_ca", caPath, "jail_ca_bundle", layout.CABundle)
	return &secretSetup{store: store, ca: ca, roots: roots, bundle: bundle}, nil
}

// runnerExtra are the files the jails get beside the runner's: the CA
// bundle, when there are secrets.
func (s *secretSetup) runnerExtra() map[string][]byte {
	if s == nil {
		return nil
	}
	return map[string][]byte{layout.CABundleName: s.bundle}
}

// reloadSecrets reads the secrets' files again at each signal on hup
// (SIGHUP) until ctx ends: a rotated value is used from the next request
// on, by runs and sessions alike, without a restart.
func reloadSecrets(ctx context.Context, hup <-chan os.Signal, s *secretSetup, log *slog.Logger) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
		}
		if s == nil {
			log.Info("SIGHUP: no secrets to reload")
			continue
		}
		changed, err := s.store.Reload()
		if err != nil {
			log.Error("secrets reloaded, some kept their values", "changed", changed, "err", err)
			continue
		}
		log.Info("secrets reloaded", "changed", changed)
	}
}
