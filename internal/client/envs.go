package client

import (
	"context"
	"net/url"

	"github.com/cellblock/cellblock/internal/api"
)

// Envs lists the daemon's dependency environments.
func (c *Client) Envs(ctx context.Context) (*api.EnvList, error) {
	var list api.EnvList
	if err := c.call(ctx, "GET", api.PathEnvs, nil, &list); err != nil {
		return nil, err
	}
	return &list, nil
}

// BuildEnv builds an environment ahead of time (or finds it) and returns
// its description. A refusal (bad requirement, dependency_error) is an
// *api.Error.
func (c *Client) BuildEnv(ctx context.Context, req *api.EnvBuildRequest) (*api.EnvBuildResult, error) {
	var res api.EnvBuildResult
	if err := c.call(ctx, "POST", api.PathEnvs, req, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// RemoveEnv deletes the environment with the given id.
func (c *Client) RemoveEnv(ctx context.Context, id string) (*api.EnvRemoveResult, error) {
	var res api.EnvRemoveResult
	if err := c.call(ctx, "DELETE", api.PathEnvs+"/"+url.PathEscape(id), nil, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// PruneEnvs deletes every environment no run uses.
func (c *Client) PruneEnvs(ctx context.Context) (*api.EnvRemoveResult, error) {
	var res api.EnvRemoveResult
	if err := c.call(ctx, "POST", api.PathEnvsPrune, struct{}{}, &res); err != nil {
		return nil, err
	}
	return &res, nil
}
