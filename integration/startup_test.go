package integration

import (
	"strings"
	"testing"
)

// A daemon that builds its default rootfs logs the build and its
// warnings: the rootfs store logs through the daemon's logger, not into
// the void. (Before, the store's logger was never set outside tests, so
// warnings such as "no CA bundle on the host" were lost in production.)
func TestRootfsBuildIsLogged(t *testing.T) {
	requireRoot(t)
	d := startDaemon(t, "--state-dir", searchableDir(t, "cellblock-it-empty-"), "--prestart", "0")
	if log := d.Log(); !strings.Contains(log, `"msg":"rootfs built"`) {
		t.Errorf("the daemon built its rootfs without logging it:\n%s", log)
	}
}
