package image

import (
	"context"
	"os"
	"testing"
)

func TestZZBuildBase(t *testing.T) {
	if err := Build(context.Background(), "base", "/var/cache/wovyr-test/oci/images", os.Stderr); err != nil {
		t.Fatal(err)
	}
}
