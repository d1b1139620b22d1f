package snapshot

import (
	"bytes"
	"os"
	"path/filepath"
)

// Audit says what is wrong with a golden's directory for the escape
// battery (row 86, on every backend that snapshots): anything that is not
// its owner's alone, as Find requires, and every file that holds marker (a
// battery canary, which no golden may carry).
func Audit(dir string, marker []byte) []string {
	var bad []string
	if err := checkPrivate(dir); err != nil {
		bad = append(bad, err.Error())
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if data, err := os.ReadFile(filepath.Join(dir, e.Name())); err == nil && bytes.Contains(data, marker) {
			bad = append(bad, "a canary in the golden's "+e.Name())
		}
	}
	return bad
}
