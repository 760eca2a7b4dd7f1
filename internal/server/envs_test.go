package server

import (
	"context"
	"errors"
	"testing"

	"github.com/cellblock/cellblock/internal/api"
)

// fakeEnvs is an executor that also manages environments.
type fakeEnvs struct {
	fakeExecutor
	built *api.EnvBuildRequest
}

func (f *fakeEnvs) Envs(context.Context) (*api.EnvList, error) {
	return &api.EnvList{Envs: []api.EnvInfo{{ID: "e1", InUse: 1}}, BudgetBytes: 10}, nil
}

func (f *fakeEnvs) BuildEnv(_ context.Context, req *api.EnvBuildRequest) (*api.EnvBuildResult, error) {
	f.built = req
	if req.Dependencies[0] == "cbmissing" {
		return nil, api.Errorf(api.ErrDependency, "dependencies", "pip could not install cbmissing")
	}
	return &api.EnvBuildResult{Environment: &api.Environment{ID: "e2"}, Python: "3.12.1"}, nil
}

func (f *fakeEnvs) RemoveEnv(_ context.Context, id string) (*api.EnvRemoveResult, error) {
	switch id {
	case "busy":
		return nil, api.Wrap(api.ErrInUse, "id", errors.New("attached to 1 run"))
	case "e1":
		return &api.EnvRemoveResult{Removed: []api.EnvInfo{{ID: id}}}, nil
	}
	return nil, api.Errorf(api.ErrNotFound, "id", "%q", id)
}

func (f *fakeEnvs) PruneEnvs(context.Context) (*api.EnvRemoveResult, error) {
	return &api.EnvRemoveResult{Removed: []api.EnvInfo{{ID: "e3"}}, FreedBytes: 5}, nil
}

func TestEnvRoutes(t *testing.T) {
	f := &fakeEnvs{}
	c, stop := serve(t, f, Config{})
	defer stop()
	ctx := context.Background()

	list, err := c.Envs(ctx)
	if err != nil || len(list.Envs) != 1 || list.Envs[0].ID != "e1" {
		t.Errorf("list: %+v %v", list, err)
	}
	res, err := c.BuildEnv(ctx, &api.EnvBuildRequest{Dependencies: []string{"rich"}, Python: "3.12"})
	if err != nil || res.Environment.ID != "e2" || f.built.Python != "3.12" {
		t.Errorf("build: %+v %v", res, err)
	}
	var aerr *api.Error
	for _, c2 := range []struct {
		name  string
		call  func() error
		typ   api.ErrorType
		field string
	}{
		{"no dependencies", func() error { _, err := c.BuildEnv(ctx, &api.EnvBuildRequest{}); return err }, api.ErrBadRequest, "dependencies"},
		{"bad python", func() error {
			_, err := c.BuildEnv(ctx, &api.EnvBuildRequest{Dependencies: []string{"x"}, Python: "three"})
			return err
		}, api.ErrBadRequest, "python"},
		{"dependency error", func() error {
			_, err := c.BuildEnv(ctx, &api.EnvBuildRequest{Dependencies: []string{"cbmissing"}})
			return err
		}, api.ErrDependency, "dependencies"},
		{"bad preload", func() error {
			_, err := c.BuildEnv(ctx, &api.EnvBuildRequest{Dependencies: []string{"x"}, Preload: []string{"x", "os; rm"}})
			return err
		}, api.ErrBadRequest, "preload[1]"},
		{"not found", func() error { _, err := c.RemoveEnv(ctx, "nope"); return err }, api.ErrNotFound, "id"},
		{"in use", func() error { _, err := c.RemoveEnv(ctx, "busy"); return err }, api.ErrInUse, "id"},
	} {
		err := c2.call()
		if !errors.As(err, &aerr) || aerr.Type != c2.typ || aerr.Field != c2.field {
			t.Errorf("%s: %v; want %s on %s", c2.name, err, c2.typ, c2.field)
		}
	}
	// The preload list reaches the manager as sent: absent, or a list.
	for _, want := range [][]string{nil, {}, {"pandas", "numpy"}} {
		if _, err := c.BuildEnv(ctx, &api.EnvBuildRequest{Dependencies: []string{"rich"}, Preload: want}); err != nil ||
			(f.built.Preload == nil) != (want == nil) || len(f.built.Preload) != len(want) {
			t.Errorf("build with preload %#v: manager got %#v, %v", want, f.built.Preload, err)
		}
	}
	if r, err := c.RemoveEnv(ctx, "e1"); err != nil || len(r.Removed) != 1 {
		t.Errorf("remove: %+v %v", r, err)
	}
	if r, err := c.PruneEnvs(ctx); err != nil || r.FreedBytes != 5 {
		t.Errorf("prune: %+v %v", r, err)
	}
}

func TestEnvBuildRefusesUnknownFields(t *testing.T) {
	req := []byte(`{"dependencies": ["rich"], "index_url": "http://evil"}`)
	var v api.EnvBuildRequest
	if aerr := decodeBody(req, &v); aerr == nil || aerr.Field != "index_url" {
		t.Errorf("unknown field: %+v", aerr)
	}
	if aerr := decodeBody([]byte(`{"dependencies": "rich"}`), &v); aerr == nil || aerr.Field != "dependencies" {
		t.Errorf("wrong type: %+v", aerr)
	}
}

// TestRunRequestCannotPreload: what a jail preloads is the environment's,
// set by whoever builds it; a run request cannot name modules.
func TestRunRequestCannotPreload(t *testing.T) {
	_, aerr := DecodeRunRequest([]byte(`{"code": "import os", "dependencies": ["rich"], "preload": ["rich"]}`))
	if aerr == nil || aerr.Field != "preload" || aerr.Type != api.ErrBadRequest {
		t.Errorf("a run request with preload: %+v", aerr)
	}
}

// TestEnvRoutesNeedAManager: an executor without environments serves no
// environment routes.
func TestEnvRoutesNeedAManager(t *testing.T) {
	c, stop := serve(t, &fakeExecutor{}, Config{})
	defer stop()
	if _, err := c.Envs(context.Background()); err == nil {
		t.Errorf("listed environments of an executor that has none")
	}
}
