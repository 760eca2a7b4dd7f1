package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/cellblock/cellblock/internal/api"
)

// post sends a raw body to the daemon and decodes the answer.
func post(t *testing.T, d *Daemon, body string) (int, *api.Result) {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", d.Socket)
	}}}
	resp, err := hc.Post("http://cellblockd"+api.PathRuns, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var r api.Result
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatalf("answer is not a result object: %q", data)
	}
	return resp.StatusCode, &r
}

func TestBadRequestsNameTheField(t *testing.T) {
	d := daemon(t)
	for _, c := range []struct {
		body   string
		status int
		typ    api.ErrorType
		field  string
	}{
		{`{}`, 400, api.ErrBadRequest, "code"},
		{`{"code": "print(1)", "bogus": 1}`, 400, api.ErrBadRequest, "bogus"},
		{`{"code": 5}`, 400, api.ErrBadRequest, "code"},
		{`{"code": "x", "timeout_ms": "soon"}`, 400, api.ErrBadRequest, "timeout_ms"},
		{`{"code": "x", "timeout_ms": -1}`, 400, api.ErrBadRequest, "timeout_ms"},
		{`{"code": "x", "timeout_ms": 99999999}`, 400, api.ErrOverLimit, "timeout_ms"},
		{`{"code": "x", "memory_bytes": 999999999999}`, 400, api.ErrOverLimit, "memory_bytes"},
		{`{"code": "x", "pids": 100000}`, 400, api.ErrOverLimit, "pids"},
		{`{"code": "x", "env": {"PATH": "/evil"}}`, 400, api.ErrBadRequest, "env"},
		{`{"code": "x", "env": {"LD_PRELOAD": "/x.so"}}`, 400, api.ErrBadRequest, "env"},
		{`{"code": "x", "filename": "../etc/passwd"}`, 400, api.ErrBadRequest, "filename"},
		{`{"code": "x", "python": "3.99"}`, 400, api.ErrUnknownPython, "python"},
		{`{"code": "x", "python": "three"}`, 400, api.ErrBadRequest, "python"},
		{`{"code": "x"`, 400, api.ErrBadRequest, ""},
		{`[1,2]`, 400, api.ErrBadRequest, ""},
		{`null`, 400, api.ErrBadRequest, ""},
		{`{"code": "x"} {"code": "y"}`, 400, api.ErrBadRequest, ""},
	} {
		status, res := post(t, d, c.body)
		if status != c.status || res.Error == nil || res.Error.Type != c.typ || res.Error.Field != c.field {
			t.Errorf("%s: status %d error %+v; want %d %s field %q", c.body, status, res.Error, c.status, c.typ, c.field)
		}
	}
	big := `{"code": "` + strings.Repeat("x", api.MaxRequestBytes) + `"}`
	if status, res := post(t, d, big); status != 413 || res.Error == nil || res.Error.Type != api.ErrTooLarge {
		t.Errorf("oversized body: status %d error %+v", status, res.Error)
	}
	// The daemon is still fine.
	runOK(t, d, &api.RunRequest{Code: "print(1)"})
}

func TestUnknownPythonListsVersions(t *testing.T) {
	d := daemon(t)
	status, res := post(t, d, `{"code": "x", "python": "3.99"}`)
	info, err := d.Client.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if status != 400 || !strings.Contains(res.Error.Message, info.Pythons[0].Version) {
		t.Errorf("unknown version error does not list the versions: %+v", res.Error)
	}
}

func TestPeerCredentials(t *testing.T) {
	d := daemon(t)
	// Let anyone connect so that the daemon's own check is what refuses.
	if err := os.Chmod(d.Socket, 0o666); err != nil {
		t.Fatal(err)
	}
	defer os.Chmod(d.Socket, 0o660)
	cli := bin(t, "cellblock")
	for _, c := range []struct {
		uid  uint32
		want string
	}{
		{65534, "forbidden"}, // nobody: not root, not allowed
		{65533, ""},          // allowed with --allow-uid by the shared daemon
	} {
		cmd := exec.Command(cli, "--socket", d.Socket, "run", "-c", "print('as allowed uid')")
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: c.uid, Gid: 65534}}
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		if c.want == "" {
			if err != nil || out.String() != "as allowed uid\n" {
				t.Errorf("uid %d: %v stdout %q stderr %q", c.uid, err, out.String(), errb.String())
			}
			continue
		}
		if err == nil || !strings.Contains(errb.String(), c.want) {
			t.Errorf("uid %d: err %v stderr %q; want %q", c.uid, err, errb.String(), c.want)
		}
	}
}

func TestSocketMode(t *testing.T) {
	d := startDaemon(t)
	st, err := os.Stat(d.Socket)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o660 || st.Mode()&os.ModeSocket == 0 {
		t.Errorf("socket mode %v, want socket 0660", st.Mode())
	}
}

func TestInfo(t *testing.T) {
	d := daemon(t)
	info, err := d.Client.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Pythons) == 0 || info.CgroupMode == "" || !info.Seccomp || info.Defaults.TimeoutMs == 0 || info.Maxima.MemoryBytes == 0 {
		t.Errorf("info incomplete: %+v", info)
	}
}
