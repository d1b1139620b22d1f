package plugin

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/wovyr/wovyr/plugin/plugintest"
)

// The C test components (testdata/calc, testdata/rand, testdata/tally) are written in the
// component model's canonical ABI, built with clang into a core module and
// wrapped with jco (embed the WIT, then new). They are committed beside
// their source (a few KB) so the other tests run where npm is unreachable;
// TestComponentsBuildFromSource rebuilds them with the real toolchains and
// fails if the committed bytes differ from the build. The JavaScript one
// (testdata/jsdemo, about 12 MB) is only built (js_test.go).

func TestComponentsBuildFromSource(t *testing.T) {
	cmd := plugintest.Jco(t)
	for _, name := range []string{"calc", "rand", "tally"} {
		built := plugintest.C(t, cmd, name)
		committed, err := os.ReadFile(filepath.Join("testdata", name, name+".wasm"))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(built, committed) {
			t.Errorf("testdata/%s/%s.wasm differs from what its source builds (%d vs %d bytes): rebuild and commit it", name, name, len(committed), len(built))
		}
	}
}
