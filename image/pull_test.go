package image

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// registryWithAuth is an in-process OCI registry on loopback that answers
// only requests with user:pass basic auth.
func registryWithAuth(t *testing.T, user, pass string) string {
	t.Helper()
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != user || p != pass {
			w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		reg.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// dockerConfig points the docker config file at one with host's credentials.
func dockerConfig(t *testing.T, host, user, pass string) {
	t.Helper()
	dir := t.TempDir()
	auth := base64.StdEncoding.EncodeToString([]byte(user + ":" + pass))
	conf := fmt.Sprintf(`{"auths": {%q: {"auth": %q}}}`, host, auth)
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("DOCKER_CONFIG", dir)
}

// TestPull: an image pushed to a registry that wants credentials is pulled
// with those of the docker config file, and its layers get every defence
// an import gives (checkNeutralised); a layer that leaves the root fails
// the pull and leaves nothing; without credentials, or for a tag the
// registry lacks, the pull fails and leaves nothing.
func TestPull(t *testing.T) {
	host := registryWithAuth(t, "ci", "s3cret")
	push := func(repo string, traversal bool) string {
		ref, err := name.ParseReference(host + "/" + repo + ":v1")
		if err != nil {
			t.Fatal(err)
		}
		if err := remote.Write(ref, hostileImage(t, traversal), remote.WithAuth(&authn.Basic{Username: "ci", Password: "s3cret"})); err != nil {
			t.Fatal(err)
		}
		return ref.String()
	}
	hostile, traversal := push("tools/hostile", false), push("tools/traversal", true)
	work := t.TempDir()
	dir := filepath.Join(work, "images")
	ctx := context.Background()

	t.Setenv("DOCKER_CONFIG", t.TempDir()) // no credentials
	if err := Pull(ctx, hostile, "hostile", dir); err == nil || !strings.Contains(err.Error(), "UNAUTHORIZED") && !strings.Contains(err.Error(), "401") {
		t.Fatalf("pull without credentials: %v, want a 401", err)
	}
	dockerConfig(t, host, "ci", "s3cret")
	if err := Pull(ctx, hostile, "hostile", dir); err != nil {
		t.Fatal(err)
	}
	checkNeutralised(t, work, dir)
	if _, err := os.Stat(filepath.Join(dir, "hostile", "digest")); err != nil {
		t.Errorf("pulled template without its digest: %v", err)
	}
	if err := Pull(ctx, hostile, "hostile", dir); !errors.Is(err, ErrExists) {
		t.Errorf("second pull into the same name: %v, want ErrExists", err)
	}
	if err := Pull(ctx, traversal, "traversal", dir); err == nil {
		t.Error("a layer with ../../escape was pulled")
	}
	if err := Pull(ctx, host+"/tools/hostile:nope", "nope", dir); err == nil {
		t.Error("a tag the registry lacks was pulled")
	}
	if err := Pull(ctx, "Not A Ref", "x", dir); !errors.Is(err, ErrBadRef) {
		t.Errorf("bad reference: %v, want ErrBadRef", err)
	}
	ents, _ := os.ReadDir(dir)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if strings.Join(names, " ") != "hostile" {
		t.Errorf("templates after the pulls: %v, want only hostile", names)
	}
	if _, err := os.Stat(filepath.Join(work, "escape")); err == nil {
		t.Error("traversal wrote outside")
	}
}
