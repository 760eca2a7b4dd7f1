package client

import (
	"context"
	"net/url"

	"github.com/cellblock/cellblock/internal/api"
)

// CreateSession starts a session and returns its description; runs go to
// it with RunRequest.Session set to its ID. A refusal is an *api.Error.
func (c *Client) CreateSession(ctx context.Context, req *api.SessionRequest) (*api.Session, error) {
	var s api.Session
	if err := c.call(ctx, "POST", api.PathSessions, req, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// Sessions lists the caller's sessions (every session, for root).
func (c *Client) Sessions(ctx context.Context) (*api.SessionList, error) {
	var list api.SessionList
	if err := c.call(ctx, "GET", api.PathSessions, nil, &list); err != nil {
		return nil, err
	}
	return &list, nil
}

// Session describes one session; an unknown one is an *api.Error of class
// api.ErrSessionNotFound.
func (c *Client) Session(ctx context.Context, id string) (*api.Session, error) {
	var s api.Session
	if err := c.call(ctx, "GET", api.PathSessions+"/"+url.PathEscape(id), nil, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// DeleteSession ends a session, killing a run in progress in it.
func (c *Client) DeleteSession(ctx context.Context, id string) error {
	var res api.SessionDeleted
	return c.call(ctx, "DELETE", api.PathSessions+"/"+url.PathEscape(id), nil, &res)
}
