package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"strings"

	"github.com/cellblock/cellblock/internal/api"
)

// OpenArtifact opens the content of an artifact a run of this uid
// produced (api.File.SHA256), and returns it with its size. A body cut
// short of its size reads as io.ErrUnexpectedEOF. An artifact that does
// not exist, expired or is another uid's is an *api.Error of class
// api.ErrNotFound. The caller closes the reader.
func (c *Client) OpenArtifact(ctx context.Context, sum string) (io.ReadCloser, int64, error) {
	return c.openFile(ctx, api.PathArtifacts+"/"+url.PathEscape(sum))
}

// Artifact reads an artifact whole, refusing one over max bytes.
func (c *Client) Artifact(ctx context.Context, sum string, max int64) ([]byte, error) {
	rc, size, err := c.OpenArtifact(ctx, sum)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	if size > max {
		return nil, fmt.Errorf("artifact %s is %d bytes, over %d", sum, size, max)
	}
	b, err := io.ReadAll(io.LimitReader(rc, max+1))
	if err != nil {
		return nil, fmt.Errorf("read artifact %s: %w", sum, err)
	}
	if int64(len(b)) != size {
		return nil, fmt.Errorf("read artifact %s: %d bytes of %d", sum, len(b), size)
	}
	return b, nil
}

// sessionFilePath is the API path of the file at p of session id.
func sessionFilePath(id, p string) string {
	parts := strings.Split(p, "/")
	for i, s := range parts {
		parts[i] = url.PathEscape(s)
	}
	return api.PathSessions + "/" + url.PathEscape(id) + "/" + api.SessionFilesDir + "/" + strings.Join(parts, "/")
}

// OpenSessionFile opens the file at p (relative to /work) of a session,
// and returns it with its size. A file that changed while the daemon read
// it ends short, which reads as io.ErrUnexpectedEOF.
func (c *Client) OpenSessionFile(ctx context.Context, id, p string) (io.ReadCloser, int64, error) {
	if why := api.CheckFilePath(p); why != "" {
		return nil, 0, api.Errorf(api.ErrBadRequest, "path", "%q %s", p, why)
	}
	return c.openFile(ctx, sessionFilePath(id, p))
}

// PutSessionFile writes size bytes from r as the file at p (relative to
// /work) of a session, between its runs.
func (c *Client) PutSessionFile(ctx context.Context, id, p string, r io.Reader, size int64) (*api.SessionFileWritten, error) {
	if why := api.CheckFilePath(p); why != "" {
		return nil, api.Errorf(api.ErrBadRequest, "path", "%q %s", p, why)
	}
	resp, err := c.do(ctx, &request{method: "PUT", path: sessionFilePath(id, p), contentType: "application/octet-stream",
		stream: r, streamLen: size})
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("read the answer of cellblockd: %w", err)
	}
	if resp.StatusCode != 200 {
		return nil, answerError(resp, data)
	}
	var w api.SessionFileWritten
	if err := json.Unmarshal(data, &w); err != nil {
		return nil, fmt.Errorf("decode the answer of cellblockd: %w", err)
	}
	return &w, nil
}

// openFile GETs a file the daemon streams: its body, and its size.
func (c *Client) openFile(ctx context.Context, path string) (io.ReadCloser, int64, error) {
	resp, err := c.do(ctx, &request{method: "GET", path: path})
	if err != nil {
		return nil, 0, err
	}
	if resp.StatusCode != 200 {
		defer resp.Body.Close()
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return nil, 0, answerError(resp, data)
	}
	if resp.ContentLength < 0 {
		resp.Body.Close()
		return nil, 0, fmt.Errorf("cellblockd sent %s without its size", path)
	}
	return resp.Body, resp.ContentLength, nil
}

// answerError is the *api.Error an answer that is not 200 carries.
func answerError(resp *response, data []byte) error {
	var r api.Result
	if json.Unmarshal(data, &r) == nil && r.Error != nil {
		return r.Error
	}
	return fmt.Errorf("cellblockd answered %s", resp.Status)
}
