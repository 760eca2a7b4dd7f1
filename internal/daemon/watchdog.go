package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	sddaemon "github.com/coreos/go-systemd/v22/daemon"

	"github.com/cellblock/cellblock/internal/api"
)

// watchdog pings systemd's watchdog (WATCHDOG=1) at half the interval the
// service manager asked for with WATCHDOG_USEC. While the daemon starts up
// it pings unconditionally; once it serves, each ping is earned by asking
// the daemon's own socket for /v1/health, so that a wedged accept loop or
// HTTP server gets the daemon restarted.
type watchdog struct {
	interval time.Duration
	socket   atomic.Pointer[string]
	stop     context.CancelFunc
	done     sync.WaitGroup
}

// startWatchdog starts pinging if WATCHDOG_USEC asks for it; otherwise it
// returns nil. A nil *watchdog's methods do nothing.
func startWatchdog(log *slog.Logger) *watchdog {
	interval, err := sddaemon.SdWatchdogEnabled(false)
	if err != nil {
		log.Warn("ignoring the watchdog settings systemd passed", "err", err)
		return nil
	}
	if interval <= 0 {
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &watchdog{interval: interval / 2, stop: cancel}
	log.Info("pinging the systemd watchdog", "every", w.interval)
	w.done.Add(1)
	go func() {
		defer w.done.Done()
		w.loop(ctx, log)
	}()
	return w
}

func (w *watchdog) loop(ctx context.Context, log *slog.Logger) {
	t := time.NewTicker(w.interval)
	defer t.Stop()
	healthy := true
	for {
		if err := w.check(ctx); err != nil {
			if healthy {
				log.Error("health check failed; not pinging the watchdog", "err", err)
			}
			healthy = false
		} else {
			healthy = true
			_, _ = sddaemon.SdNotify(false, sddaemon.SdNotifyWatchdog)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// check asks the daemon's socket for its health, once serving has begun.
func (w *watchdog) check(ctx context.Context) error {
	sock := w.socket.Load()
	if sock == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, w.interval)
	defer cancel()
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", *sock)
		},
		DisableKeepAlives: true,
	}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://cellblockd"+api.PathHealth, nil)
	if err != nil {
		return err
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("health answered %s", resp.Status)
	}
	return nil
}

// serving makes the pings depend on the health of the API on socket.
func (w *watchdog) serving(socket string) {
	if w != nil {
		w.socket.Store(&socket)
	}
}

// close stops pinging and waits for the pinger to end.
func (w *watchdog) close() {
	if w != nil {
		w.stop()
		w.done.Wait()
	}
}
