package envs

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// Package is one distribution installed in an environment: the resolved
// set, recorded as the provenance of every run that uses it.
type Package struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	// Hash identifies what was installed: "sha256:<hex>" is the SHA-256 of
	// the wheel file the installer used (the hash an index publishes and
	// `pip hash` prints), when the installer reports it (pip's --report);
	// otherwise "record-sha256:<hex>" is the SHA-256 of the installed
	// dist-info RECORD, which lists every installed file with its own
	// SHA-256.
	Hash string `json:"hash"`
}

// maxMetaFile bounds how much of a METADATA or RECORD file is read.
const maxMetaFile = 16 << 20

// readInstalled lists the distributions installed in site, from their
// *.dist-info directories. wheelHashes maps normalized project names to
// the wheel hashes the installer reported. Only regular files and
// directories are read, never through a symbolic link: the tree was
// written by a jail.
func readInstalled(site string, wheelHashes map[string]string) ([]Package, error) {
	entries, err := os.ReadDir(site)
	if err != nil {
		return nil, fmt.Errorf("read installed packages: %w", err)
	}
	var pkgs []Package
	for _, e := range entries {
		if !e.IsDir() || !strings.HasSuffix(e.Name(), ".dist-info") {
			continue
		}
		dir := filepath.Join(site, e.Name())
		meta, err := readRegular(filepath.Join(dir, "METADATA"))
		if err != nil {
			return nil, fmt.Errorf("read installed packages: %s: %w", e.Name(), err)
		}
		name, version := metadataNameVersion(meta)
		if name == "" || version == "" {
			return nil, fmt.Errorf("read installed packages: %s/METADATA has no Name or Version", e.Name())
		}
		p := Package{Name: name, Version: version, Hash: wheelHashes[NormalizeName(name)]}
		if p.Hash == "" {
			record, err := readRegular(filepath.Join(dir, "RECORD"))
			if err != nil {
				return nil, fmt.Errorf("read installed packages: %s: %w", e.Name(), err)
			}
			sum := sha256.Sum256(record)
			p.Hash = "record-sha256:" + hex.EncodeToString(sum[:])
		}
		pkgs = append(pkgs, p)
	}
	slices.SortFunc(pkgs, func(a, b Package) int { return strings.Compare(NormalizeName(a.Name), NormalizeName(b.Name)) })
	return pkgs, nil
}

// readRegular reads a regular file without following a symbolic link.
func readRegular(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxMetaFile+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxMetaFile {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, maxMetaFile)
	}
	return b, nil
}

// metadataNameVersion reads the Name and Version headers of a core
// metadata file (RFC 822 style headers, up to the first empty line).
func metadataNameVersion(meta []byte) (name, version string) {
	sc := bufio.NewScanner(strings.NewReader(string(meta)))
	sc.Buffer(make([]byte, 64<<10), maxMetaFile)
	for sc.Scan() {
		line := sc.Text()
		if strings.TrimSpace(line) == "" {
			break
		}
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch strings.ToLower(strings.TrimSpace(k)) {
		case "name":
			if name == "" {
				name = strings.TrimSpace(v)
			}
		case "version":
			if version == "" {
				version = strings.TrimSpace(v)
			}
		}
	}
	return name, version
}

// ParseInstallReport reads the wheel hashes from pip's installation report
// (pip install --report, pip 22.2 and later): normalized project name to
// "sha256:<hex>". Entries without a SHA-256 are left out.
func ParseInstallReport(report []byte) (map[string]string, error) {
	var r struct {
		Install []struct {
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
			DownloadInfo struct {
				ArchiveInfo struct {
					Hash   string            `json:"hash"`
					Hashes map[string]string `json:"hashes"`
				} `json:"archive_info"`
			} `json:"download_info"`
		} `json:"install"`
	}
	if err := json.Unmarshal(report, &r); err != nil {
		return nil, fmt.Errorf("parse installation report: %w", err)
	}
	hashes := make(map[string]string)
	for _, it := range r.Install {
		if it.Metadata.Name == "" {
			continue
		}
		ai := it.DownloadInfo.ArchiveInfo
		h := ai.Hashes["sha256"]
		if h == "" {
			if v, ok := strings.CutPrefix(ai.Hash, "sha256="); ok {
				h = v
			}
		}
		if _, err := hex.DecodeString(h); err != nil || len(h) != 64 {
			continue
		}
		hashes[NormalizeName(it.Metadata.Name)] = "sha256:" + strings.ToLower(h)
	}
	return hashes, nil
}
