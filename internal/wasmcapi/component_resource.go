package wasmcapi

/*
#include "component.h"
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
)

// Resources a component exports cross the host as handles. A call that
// returns own<R> leaves the resource with the host: the instance keeps it
// in its table (component.c) and the Val carries a Handle, a number unique
// within the component, which a later call on the same instance passes
// back — as borrow<R>, which leaves it held, or as own<R>, which hands it
// to the callee. Drop gives one back to the guest's destructor. Handles
// die with their instance: a handle is only ever meaningful to the
// instance whose table holds it.

// MaxHandles is how many resources the host holds for one instance; a
// call that would return more traps.
const MaxHandles = C.WOVYR_MAX_HANDLES

// held is one resource in an instance's table.
type held struct {
	slot   uint32
	res    *Resource
	moving bool // passed as own in the call being encoded
}

// HandleError is a call's argument that names no resource the instance
// holds, or one of another resource type, or one passed as own and again.
// Nothing ran.
type HandleError struct {
	Param  string // the parameter it was in
	Want   string // the parameter's type, in WIT
	Handle uint64
	Reason string
}

func (e *HandleError) Error() string {
	return fmt.Sprintf("wasmcapi: argument %s (%s): handle %d %s", e.Param, e.Want, e.Handle, e.Reason)
}

// hold adopts a resource a call returned into slot; its type is set when
// the result is read against its type (typeHandles).
func (in *Instance) hold(slot uint32) uint64 {
	h := in.comp.nextHandle.Add(1)
	if in.handles == nil {
		in.handles = map[uint64]*held{}
	}
	in.handles[h] = &held{slot: slot}
	return h
}

// Handles is how many resources the instance holds.
func (in *Instance) Handles() int { return len(in.handles) }

// EachResource calls fn for every resource handle in v, a value of type t.
func EachResource(t *Type, v *Val, fn func(t *Type, v *Val) error) error {
	if t == nil || v == nil {
		return nil
	}
	switch t.Kind {
	case KindResource:
		return fn(t, v)
	case KindList:
		for i := range v.Elems {
			if err := EachResource(t.Elem, &v.Elems[i], fn); err != nil {
				return err
			}
		}
	case KindOption:
		return EachResource(t.Elem, v.Payload, fn)
	case KindResult:
		if v.Ok {
			return EachResource(t.Ok, v.Payload, fn)
		}
		return EachResource(t.Err, v.Payload, fn)
	case KindRecord, KindTuple:
		for i := range v.Elems {
			if i < len(t.Fields) {
				if err := EachResource(t.Fields[i].Type, &v.Elems[i], fn); err != nil {
					return err
				}
			}
		}
	case KindVariant:
		for _, f := range t.Fields {
			if f.Name == v.Str {
				return EachResource(f.Type, v.Payload, fn)
			}
		}
	}
	return nil
}

// HasResource reports whether values of t can hold a resource handle.
func HasResource(t *Type) bool {
	if t == nil {
		return false
	}
	switch t.Kind {
	case KindResource:
		return true
	case KindList, KindOption:
		return HasResource(t.Elem)
	case KindResult:
		return HasResource(t.Ok) || HasResource(t.Err)
	}
	for _, f := range t.Fields {
		if HasResource(f.Type) {
			return true
		}
	}
	return false
}

// checkHandles holds a call's resource arguments to what the instance
// holds, and marks those passed as own, which the call takes.
func (in *Instance) checkHandles(f *Export, args []Val) (err error) {
	var moving []*held
	defer func() {
		if err != nil { // nothing will run: nothing is taken
			for _, x := range moving {
				x.moving = false
			}
		}
	}()
	seen := map[uint64]bool{}
	for i, p := range f.Type.Params {
		if !HasResource(p.Type) {
			continue
		}
		err = EachResource(p.Type, &args[i], func(t *Type, v *Val) error {
			x, ok := in.handles[v.Handle]
			bad := func(why string) error {
				return &HandleError{Param: p.Name, Want: t.String(), Handle: v.Handle, Reason: why}
			}
			switch {
			case !ok || x.res == nil:
				return bad("is not held by this instance")
			case x.res != t.Resource:
				return bad("is a " + x.res.Name)
			case x.moving || (!t.Borrow && seen[v.Handle]):
				return bad("is passed to its new owner and again in the same call")
			}
			seen[v.Handle] = true
			if !t.Borrow {
				x.moving = true
				moving = append(moving, x)
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// release forgets the handles a call took (passed as own): the callee has
// them now, whatever the call's end.
func (in *Instance) release() {
	for h, x := range in.handles {
		if x.moving {
			delete(in.handles, h)
		}
	}
}

// typeHandles gives the handles a call returned their resource type.
func (in *Instance) typeHandles(t *Type, v *Val) {
	EachResource(t, v, func(t *Type, v *Val) error {
		if x, ok := in.handles[v.Handle]; ok {
			x.res = t.Resource
		}
		return nil
	})
}

// ErrNotHeld is Drop's error for a handle the instance does not hold.
var ErrNotHeld = errors.New("wasmcapi: the instance holds no such resource")

// Drop gives resource h back to the guest, whose destructor runs under s's
// fuel and deadline like a call; an end other than CallOK poisons the
// instance.
func (in *Instance) Drop(ctx context.Context, h uint64, s CallSpec) (*CallResult, error) {
	if in.poisoned {
		return nil, ErrPoisoned
	}
	x, ok := in.handles[h]
	if !ok {
		return nil, ErrNotHeld
	}
	delete(in.handles, h)
	var call C.wovyr_ccall
	call.fuel = C.uint64_t(s.Fuel)
	call.wall_ns = C.uint64_t(s.Wall.Nanoseconds())
	defer in.disarm(in.arm(ctx))
	C.wovyr_cinst_drop(in.ptr, &call, C.uint32_t(x.slot))
	return in.ended(&call), nil
}

// HandleSet returns the handles the instance holds.
func (in *Instance) HandleSet() map[uint64]bool {
	s := make(map[uint64]bool, len(in.handles))
	for h := range in.handles {
		s[h] = true
	}
	return s
}
