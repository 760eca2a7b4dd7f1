package daemon

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/coreos/go-systemd/v22/activation"

	"github.com/cellblock/cellblock/internal/config"
	"github.com/cellblock/cellblock/internal/peercred"
)

// listen returns the socket systemd passed by socket activation, or makes
// the daemon's own at cfg.Socket: mode 0660, group cfg.SocketGroup. Either
// way the uids of --allow-uid may connect too, by an ACL on the socket
// file. A stale socket left by a dead daemon is removed; a live one is an
// error.
func listen(cfg config.Config, log *slog.Logger) (net.Listener, bool, error) {
	lns, err := activation.Listeners()
	if err != nil {
		return nil, false, fmt.Errorf("socket activation: %w", err)
	}
	for _, ln := range lns {
		if ln != nil && ln.Addr().Network() == "unix" {
			log.Info("using the socket passed by systemd", "socket", ln.Addr().String())
			// systemd made it (SocketMode=0660, SocketGroup=): the
			// uids of --allow-uid get in by its ACL.
			path := ln.Addr().String()
			if path == "" || path[0] == '@' {
				if len(cfg.AllowUIDs) > 0 {
					ln.Close()
					return nil, false, fmt.Errorf("--allow-uid needs a socket file to give the uids access to, and systemd passed %q", path)
				}
				return ln, true, nil
			}
			if err := peercred.AllowUIDsOnSocket(path, cfg.AllowUIDs); err != nil {
				ln.Close()
				return nil, false, err
			}
			return ln, true, nil
		}
	}
	path := cfg.Socket
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, false, fmt.Errorf("socket directory: %w", err)
	}
	if err := removeStaleSocket(path); err != nil {
		return nil, false, err
	}
	// Create the socket with no permissions for others, then open it up to
	// the group: nobody can connect between bind and chmod.
	old := syscall.Umask(0o177)
	ln, err := net.Listen("unix", path)
	syscall.Umask(old)
	if err != nil {
		return nil, false, fmt.Errorf("listen on %s: %w", path, err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	gid := 0
	if cfg.SocketGroup != "" {
		if g, err := user.LookupGroup(cfg.SocketGroup); err == nil {
			gid, _ = strconv.Atoi(g.Gid)
		} else {
			log.Warn("socket group does not exist; only root and --allow-uid may connect", "group", cfg.SocketGroup)
		}
	}
	if err := os.Chown(path, 0, gid); err != nil {
		ln.Close()
		return nil, false, fmt.Errorf("chown %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o660); err != nil {
		ln.Close()
		return nil, false, fmt.Errorf("chmod %s: %w", path, err)
	}
	// The uids of --allow-uid, in the group or not, get in by the
	// socket's ACL; everyone else stays out.
	if err := peercred.AllowUIDsOnSocket(path, cfg.AllowUIDs); err != nil {
		ln.Close()
		return nil, false, err
	}
	return ln, false, nil
}

// removeStaleSocket removes path if it is a socket nobody listens on.
func removeStaleSocket(path string) error {
	st, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("socket %s: %w", path, err)
	}
	if st.Mode()&os.ModeSocket == 0 {
		return fmt.Errorf("%s exists and is not a socket; refusing to replace it", path)
	}
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		c.Close()
		return fmt.Errorf("another daemon is already serving %s", path)
	}
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("remove stale socket %s: %w", path, err)
	}
	return nil
}
