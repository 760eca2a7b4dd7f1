package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"github.com/cellblock/cellblock/internal/api"
)

// Envs lists the daemon's dependency environments.
func (c *Client) Envs(ctx context.Context) (*api.EnvList, error) {
	var list api.EnvList
	if err := c.call(ctx, http.MethodGet, api.PathEnvs, nil, &list); err != nil {
		return nil, err
	}
	return &list, nil
}

// BuildEnv builds an environment ahead of time (or finds it) and returns
// its description. A refusal (bad requirement, dependency_error) is an
// *api.Error.
func (c *Client) BuildEnv(ctx context.Context, req *api.EnvBuildRequest) (*api.EnvBuildResult, error) {
	var res api.EnvBuildResult
	if err := c.call(ctx, http.MethodPost, api.PathEnvs, req, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// RemoveEnv deletes the environment with the given id.
func (c *Client) RemoveEnv(ctx context.Context, id string) (*api.EnvRemoveResult, error) {
	var res api.EnvRemoveResult
	if err := c.call(ctx, http.MethodDelete, api.PathEnvs+"/"+url.PathEscape(id), nil, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// PruneEnvs deletes every environment no run uses.
func (c *Client) PruneEnvs(ctx context.Context) (*api.EnvRemoveResult, error) {
	var res api.EnvRemoveResult
	if err := c.call(ctx, http.MethodPost, api.PathEnvsPrune, struct{}{}, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// call sends body (JSON, if not nil) and decodes a 200 answer into out. Any
// other answer becomes the *api.Error it carries.
func (c *Client) call(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("encode request: %w", err)
		}
		rd = bytes.NewReader(b)
	}
	hreq, err := http.NewRequestWithContext(ctx, method, "http://cellblockd"+path, rd)
	if err != nil {
		return err
	}
	if body != nil {
		hreq.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.do(hreq)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("read %s from cellblockd: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		var r api.Result
		if json.Unmarshal(data, &r) == nil && r.Error != nil {
			return r.Error
		}
		return fmt.Errorf("cellblockd answered %s for %s %s", resp.Status, method, path)
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("decode %s from cellblockd: %w", path, err)
	}
	return nil
}
