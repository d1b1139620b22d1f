package sandbox

import (
	"encoding/json"
	"fmt"
)

// Strength is a position on the isolation spectrum. The order is fixed and
// meaningful: a larger Strength isolates at least as well as every smaller one.
// The zero Strength means "unset" and is weaker than every backend.
type Strength int

// The isolation spectrum, weakest first.
const (
	Native Strength = iota + 1
	Wasm
	Container
	GVisor
	MicroVM
)

// Strengths lists every backend strength, weakest first.
var Strengths = []Strength{Native, Wasm, Container, GVisor, MicroVM}

var strengthNames = map[Strength]string{
	Native: "native", Wasm: "wasm", Container: "container", GVisor: "gvisor", MicroVM: "microvm",
}

func (s Strength) String() string {
	if n, ok := strengthNames[s]; ok {
		return n
	}
	if s == 0 {
		return "unset"
	}
	return fmt.Sprintf("strength(%d)", int(s))
}

// Valid reports whether s names a backend strength.
func (s Strength) Valid() bool { _, ok := strengthNames[s]; return ok }

// ParseStrength parses a backend name. The empty string is the zero Strength.
func ParseStrength(name string) (Strength, error) {
	if name == "" {
		return 0, nil
	}
	for _, s := range Strengths {
		if strengthNames[s] == name {
			return s, nil
		}
	}
	return 0, Errorf(BadInput, "strength", "unknown backend strength %q (want one of native, wasm, container, gvisor, microvm)", name)
}

// MarshalText implements encoding.TextMarshaler.
func (s Strength) MarshalText() ([]byte, error) {
	if s == 0 {
		return []byte{}, nil
	}
	if !s.Valid() {
		return nil, fmt.Errorf("invalid strength %d", int(s))
	}
	return []byte(s.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (s *Strength) UnmarshalText(b []byte) error {
	v, err := ParseStrength(string(b))
	if err != nil {
		return err
	}
	*s = v
	return nil
}

// TrustClass says how far the code of an invocation is trusted.
type TrustClass int

// Trust classes, most trusted first. The zero value is unset: an invocation
// must name its class (validation fails otherwise).
const (
	Trusted   TrustClass = iota + 1 // first-party code
	Internal                        // reviewed and signed
	Untrusted                       // third-party or model-generated
	Hostile                         // known adversarial
)

var trustNames = map[TrustClass]string{Trusted: "trusted", Internal: "internal", Untrusted: "untrusted", Hostile: "hostile"}

// TrustClasses lists every class, most trusted first.
var TrustClasses = []TrustClass{Trusted, Internal, Untrusted, Hostile}

func (t TrustClass) String() string {
	if n, ok := trustNames[t]; ok {
		return n
	}
	if t == 0 {
		return "unset"
	}
	return fmt.Sprintf("trust(%d)", int(t))
}

// Valid reports whether t is a known class.
func (t TrustClass) Valid() bool { _, ok := trustNames[t]; return ok }

// ParseTrustClass parses a trust class name.
func ParseTrustClass(name string) (TrustClass, error) {
	for _, t := range TrustClasses {
		if trustNames[t] == name {
			return t, nil
		}
	}
	return 0, Errorf(BadInput, "trust", "unknown trust class %q (want one of trusted, internal, untrusted, hostile)", name)
}

// MarshalJSON implements json.Marshaler.
func (t TrustClass) MarshalJSON() ([]byte, error) { return json.Marshal(t.String()) }

// UnmarshalJSON implements json.Unmarshaler.
func (t *TrustClass) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return Errorf(BadInput, "trust", "trust class must be a string: %v", err)
	}
	v, err := ParseTrustClass(s)
	if err != nil {
		return err
	}
	*t = v
	return nil
}

// DefaultFloor is the weakest strength each class may ever run on. Operators
// may raise these (Floors.Raise); lowering one needs an explicit override.
func DefaultFloor(t TrustClass) Strength {
	switch t {
	case Trusted:
		return Native
	case Internal:
		return Wasm
	case Untrusted:
		return GVisor
	default: // Hostile, and anything unknown fails closed.
		return MicroVM
	}
}

// Floors maps each trust class to its floor. The zero Floors uses DefaultFloor
// for every class. Floors is immutable after construction: use WithFloor.
type Floors struct {
	set map[TrustClass]Strength
}

// Of returns the floor of class t.
func (f Floors) Of(t TrustClass) Strength {
	if s, ok := f.set[t]; ok {
		return s
	}
	return DefaultFloor(t)
}

// WithFloor returns a copy of f with class t's floor set to s. Setting a floor
// below DefaultFloor(t) fails with ErrFloorLowered unless allowLower is true;
// the caller must log such an override.
func (f Floors) WithFloor(t TrustClass, s Strength, allowLower bool) (Floors, error) {
	if !t.Valid() {
		return f, Errorf(BadInput, "trust", "unknown trust class %d", int(t))
	}
	if !s.Valid() {
		return f, Errorf(BadInput, "floor", "invalid floor %d for class %s", int(s), t)
	}
	if s < DefaultFloor(t) && !allowLower {
		return f, fmt.Errorf("%w: %s floor %s is below the default %s", ErrFloorLowered, t, s, DefaultFloor(t))
	}
	n := Floors{set: make(map[TrustClass]Strength, len(f.set)+1)}
	for k, v := range f.set {
		n.set[k] = v
	}
	n.set[t] = s
	return n, nil
}

// Required is the DESIGN §1 rule: the strongest of the caller's preference,
// the explicit floor, and the trust class's floor.
func (f Floors) Required(p Policy) Strength {
	r := f.Of(p.Trust)
	if p.Preference > r {
		r = p.Preference
	}
	if p.Floor > r {
		r = p.Floor
	}
	return r
}
