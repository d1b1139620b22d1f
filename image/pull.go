package image

import (
	"context"
	"fmt"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// Pull creates template name under dir from ref, an image in an OCI
// registry (its linux/amd64 image where ref is an index). Credentials come
// from the docker config file, as docker and crane find it ($DOCKER_CONFIG,
// else ~/.docker/config.json, credential helpers included); registries on
// loopback and private addresses are spoken to over plain HTTP, as
// go-containerregistry does. The layers get every defence Import gives a
// file (see Import): a pulled image is as hostile as a saved one.
func Pull(ctx context.Context, ref, name, dir string) error {
	r, err := parseRef(ref)
	if err != nil {
		return err
	}
	img, err := remote.Image(r, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain),
		remote.WithPlatform(v1.Platform{OS: "linux", Architecture: "amd64"}))
	if err != nil {
		return fmt.Errorf("image: pull %s: %w", ref, err)
	}
	return install(ctx, dir, name, func(root string) error { return extract(ctx, img, root, bounds{MaxImportFile, MaxImportTotal}) })
}

// ErrBadRef is a reference that names no image.
var ErrBadRef = fmt.Errorf("image: bad reference")

func parseRef(ref string) (name.Reference, error) {
	r, err := name.ParseReference(ref)
	if err != nil {
		return nil, fmt.Errorf("%w %q: %v (want [REGISTRY/]REPOSITORY[:TAG|@sha256:DIGEST])", ErrBadRef, ref, err)
	}
	return r, nil
}
