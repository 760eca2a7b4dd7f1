package client

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cellblock/cellblock/internal/api"
)

// serve serves h on a fresh Unix socket with net/http's server, the one
// the daemon uses, and returns the socket and the number of connections
// accepted so far.
func serve(t *testing.T, h http.Handler) (string, *atomic.Int64) {
	sock, conns, _ := serveIdle(t, h, 0)
	return sock, conns
}

// serveIdle is serve with the server's idle timeout, also counting the
// connections it closed.
func serveIdle(t *testing.T, h http.Handler, idle time.Duration) (string, *atomic.Int64, *atomic.Int64) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "s.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	var conns, closed atomic.Int64
	srv := &http.Server{Handler: h, IdleTimeout: idle, ConnState: func(_ net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			conns.Add(1)
		case http.StateClosed:
			closed.Add(1)
		}
	}}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return sock, &conns, &closed
}

// serveRaw answers every connection with answer, written as it is.
func serveRaw(t *testing.T, answer string) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "raw.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				req, err := http.ReadRequest(br)
				if err != nil {
					return
				}
				_, _ = io.Copy(io.Discard, req.Body)
				_, _ = io.WriteString(c, answer)
			}()
		}
	}()
	return sock
}

func TestRequestAndAnswers(t *testing.T) {
	big := strings.Repeat("x", 100<<10) // past net/http's buffer: chunked
	sock, conns := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		switch r.URL.Path {
		case "/echo":
			w.Header().Set("X-Method", r.Method)
			w.Header().Set("X-Type", r.Header.Get("Content-Type")+"|"+r.Header.Get("Accept"))
			_, _ = w.Write(body)
		case "/big":
			_, _ = io.WriteString(w, big)
		case "/missing":
			http.Error(w, "no", http.StatusNotFound)
		}
	}))
	tr := &transport{socket: sock}
	ctx := context.Background()
	get := func(req *request) (*response, string) {
		t.Helper()
		resp, err := tr.do(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp, string(b)
	}
	resp, body := get(&request{method: "POST", path: "/echo", contentType: "application/json", accept: "text/x", body: []byte(`{"a":1}`)})
	if resp.ContentLength != 7 {
		t.Errorf("ContentLength %d", resp.ContentLength)
	}
	if resp.StatusCode != 200 || body != `{"a":1}` || resp.Header("x-method") != "POST" || resp.Header("X-Type") != "application/json|text/x" {
		t.Errorf("echo: %d %q %v", resp.StatusCode, body, resp.header)
	}
	resp, body = get(&request{method: "PUT", path: "/echo", stream: strings.NewReader(big + "tail"), streamLen: int64(len(big))})
	if body != big || resp.Header("X-Method") != "PUT" {
		t.Errorf("streamed body: %s, %d bytes back", resp.Header("X-Method"), len(body))
	}
	resp, body = get(&request{method: "GET", path: "/big"})
	if resp.ContentLength != -1 {
		t.Errorf("a chunked answer's ContentLength is %d", resp.ContentLength)
	}
	if resp.Header("Transfer-Encoding") != "chunked" || body != big {
		t.Errorf("big answer: %q, %d bytes", resp.Header("Transfer-Encoding"), len(body))
	}
	resp, _ = get(&request{method: "DELETE", path: "/missing"})
	if resp.StatusCode != 404 || resp.Status != "404 Not Found" {
		t.Errorf("missing: %d %q", resp.StatusCode, resp.Status)
	}
	// Every answer was read whole: one connection served them all.
	if n := conns.Load(); n != 1 {
		t.Errorf("%d connections for four sequential requests; want 1", n)
	}
}

func TestUnreadBodyIsNotReused(t *testing.T) {
	sock, conns := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, strings.Repeat("y", 64<<10))
	}))
	tr := &transport{socket: sock}
	for i := 0; i < 2; i++ {
		resp, err := tr.do(context.Background(), &request{method: "GET", path: "/"})
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 10)
		if _, err := io.ReadFull(resp.Body, buf); err != nil {
			t.Fatal(err)
		}
		resp.Body.Close() // the rest unread: the connection cannot serve another
	}
	if n := conns.Load(); n != 2 {
		t.Errorf("%d connections; a body closed half read must not be reused", n)
	}
}

func TestStaleIdleConnectionIsRetried(t *testing.T) {
	sock, conns, closed := serveIdle(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok")
	}), 20*time.Millisecond)
	tr := &transport{socket: sock}
	call := func() {
		t.Helper()
		resp, err := tr.do(context.Background(), &request{method: "POST", path: "/", body: []byte("{}")})
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != "ok" {
			t.Fatalf("answer %q", b)
		}
	}
	call()
	// The server closes the idle connection we keep (its idle timeout).
	deadline := time.Now().Add(10 * time.Second)
	for closed.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if closed.Load() == 0 {
		t.Fatal("the server never closed the idle connection")
	}
	call()
	if n := conns.Load(); n != 2 {
		t.Errorf("%d connections; the stale one should have been replaced by one more", n)
	}
}

func TestCancelClosesTheConnection(t *testing.T) {
	gone := make(chan struct{})
	sock, _ := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", api.StreamContentType)
		w.WriteHeader(200)
		w.(http.Flusher).Flush()
		<-r.Context().Done() // the caller went away
		close(gone)
	}))
	tr := &transport{socket: sock}
	ctx, cancel := context.WithCancel(context.Background())
	resp, err := tr.do(ctx, &request{method: "POST", path: "/", body: []byte("{}")})
	if err != nil {
		t.Fatal(err)
	}
	read := make(chan error, 1)
	go func() {
		_, err := resp.Body.Read(make([]byte, 10))
		read <- err
	}()
	cancel()
	if err := <-read; !errors.Is(err, context.Canceled) {
		t.Errorf("read after cancel: %v; want context.Canceled", err)
	}
	resp.Body.Close()
	select {
	case <-gone:
	case <-time.After(10 * time.Second):
		t.Fatal("the server never saw the caller go")
	}
	if _, err := tr.do(ctx, &request{method: "GET", path: "/"}); !errors.Is(err, context.Canceled) {
		t.Errorf("a request with a cancelled context: %v", err)
	}
}

func TestConcurrentRequests(t *testing.T) {
	sock, conns := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		time.Sleep(5 * time.Millisecond) // overlap the callers
		_, _ = w.Write(b)
	}))
	c := New(sock)
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; k < 8; k++ {
				want := fmt.Sprintf(`{"n":%d}`, i*100+k)
				resp, err := c.tr.do(context.Background(), &request{method: "POST", path: "/", body: []byte(want)})
				if err != nil {
					errs <- err
					return
				}
				b, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil || string(b) != want {
					errs <- fmt.Errorf("got %q %v, want %q", b, err, want)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := conns.Load(); n > 8+maxIdleConns {
		t.Errorf("%d connections for 8 callers", n)
	}
}

func TestBadAnswers(t *testing.T) {
	for _, c := range []struct{ name, answer, want string }{
		{"not HTTP", "SSH-2.0-x\r\n\r\n", "not an HTTP answer"},
		{"bad status", "HTTP/1.1 abc OK\r\n\r\n", "not an HTTP answer"},
		{"header without colon", "HTTP/1.1 200 OK\r\nbroken\r\n\r\n", "malformed answer header"},
		{"huge headers", "HTTP/1.1 200 OK\r\nX: " + strings.Repeat("a", maxHeaderBytes) + "\r\n\r\n", "too large"},
		{"bad length", "HTTP/1.1 200 OK\r\nContent-Length: -5\r\n\r\n", "bad Content-Length"},
		{"short body", "HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\nabc", "unexpected EOF"},
		{"bad chunk", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "bad chunk size"},
		{"chunk without end", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nabc", "unexpected EOF"},
		{"closed at once", "", "connection ended before an answer"},
	} {
		t.Run(c.name, func(t *testing.T) {
			tr := &transport{socket: serveRaw(t, c.answer)}
			resp, err := tr.do(context.Background(), &request{method: "GET", path: "/"})
			if err == nil {
				_, err = io.ReadAll(resp.Body)
				resp.Body.Close()
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v; want one saying %q", err, c.want)
			}
		})
	}
	t.Run("to the end of the connection", func(t *testing.T) {
		tr := &transport{socket: serveRaw(t, "HTTP/1.0 200 OK\r\n\r\nall of it")}
		resp, err := tr.do(context.Background(), &request{method: "GET", path: "/"})
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || string(b) != "all of it" {
			t.Errorf("%q %v", b, err)
		}
		if tr.get() != nil {
			t.Error("a connection whose answer ran to its end was kept")
		}
	})
	t.Run("chunked with trailers", func(t *testing.T) {
		tr := &transport{socket: serveRaw(t, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;ext=1\r\nabc\r\n2\r\nde\r\n0\r\nX-T: 1\r\n\r\n")}
		resp, err := tr.do(context.Background(), &request{method: "GET", path: "/"})
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || string(b) != "abcde" {
			t.Errorf("%q %v", b, err)
		}
	})
}

// The client against the real server's streaming: events one by one, then
// the result, through RunStream.
func TestRunStreamOverTheTransport(t *testing.T) {
	sock, _ := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req api.RunRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		w.Header().Set("Content-Type", api.StreamContentType)
		enc := json.NewEncoder(w)
		for i := 0; i < 3; i++ {
			_ = enc.Encode(api.Event{Stream: "stdout", Data: fmt.Sprintf("%s %d\n", req.Code, i)})
			w.(http.Flusher).Flush()
		}
		_ = enc.Encode(api.Event{Result: &api.Result{ExitCode: 7, Stdout: "all"}})
	}))
	c := New(sock)
	var got []string
	res, err := c.RunStream(context.Background(), &api.RunRequest{Code: "hi"}, func(stream, data string) {
		got = append(got, stream+":"+data)
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 7 || strings.Join(got, "") != "stdout:hi 0\nstdout:hi 1\nstdout:hi 2\n" {
		t.Errorf("result %+v, events %q", res, got)
	}
}
