package egresstest

import (
	"context"
	"errors"
	"log/slog"

	"github.com/wovyr/wovyr/egress"
)

// NewWithService is New plus an egress service on the rig, after removing
// what an earlier run of the same tag left behind: what a backend's egress
// battery rows run against. stop closes the service, then the rig.
func NewWithService(ctx context.Context, tag string, log *slog.Logger) (r *Rig, svc *egress.Service, stop func() error, err error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if r, err = New(ctx, tag); err != nil {
		return nil, nil, nil, err
	}
	cfg := r.Config()
	if err := egress.Reconcile(ctx, cfg, log); err != nil {
		return nil, nil, nil, errors.Join(err, r.Close())
	}
	if svc, err = egress.NewService(ctx, cfg, log); err != nil {
		return nil, nil, nil, errors.Join(err, r.Close())
	}
	stop = func() error {
		return errors.Join(svc.Close(context.WithoutCancel(ctx)), r.Close())
	}
	return r, svc, stop, nil
}
