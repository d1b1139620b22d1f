package pool

import (
	"fmt"
	"strings"

	"github.com/wovyr/wovyr/sandbox"
)

// Key names a pool: sandboxes are interchangeable only within one key.
type Key struct {
	Backend  string // backend name, e.g. "native"
	Template string // template name, e.g. an image reference
	Shape    string // resource envelope, see Shape
	Region   string // placement region; empty until regions land
}

// String renders the key as backend/template/shape[@region].
func (k Key) String() string {
	s := k.Backend + "/" + k.Template + "/" + k.Shape
	if k.Region != "" {
		s += "@" + k.Region
	}
	return s
}

// Shape renders the limits a sandbox is sized for, defaults applied, so two
// templates with the same effective envelope share a shape.
func Shape(l sandbox.Limits) string {
	l = l.WithDefaults()
	var b strings.Builder
	fmt.Fprintf(&b, "mem=%d,pids=%d,disk=%d,nofile=%d", l.Memory, l.Pids, l.Disk, l.NoFile)
	if l.CPU > 0 {
		fmt.Fprintf(&b, ",cpu=%s", l.CPU)
	}
	if l.Fuel > 0 {
		fmt.Fprintf(&b, ",fuel=%d", l.Fuel)
	}
	return b.String()
}

// KeyFor is the key of the pool for tmpl on backend: the template is named
// by its kind and image ("command:" for the backend's default image).
func KeyFor(backend string, tmpl sandbox.Template) Key {
	t := string(tmpl.Kind) + ":" + tmpl.Image
	if tmpl.Egress {
		t += "+egress" // its sandboxes differ where the network is fixed at start
	}
	for i, g := range tmpl.GPUs { // a GPU template's pool is its devices' alone
		t += map[bool]string{true: "+gpu=", false: ","}[i == 0] + g.UUID
	}
	return Key{Backend: backend, Template: t, Shape: Shape(tmpl.Limits)}
}
