package wasmcapi

/*
#include <stdlib.h>
#include "component.h"
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"runtime/cgo"
	"sync/atomic"
	"time"
	"unsafe"
)

// CallEnd says how a component call ended.
type CallEnd int

// How a call can end; the values mirror component.h.
const (
	CallOK        CallEnd = C.WOVYR_CEND_OK
	CallTrap      CallEnd = C.WOVYR_CEND_TRAP
	CallTimeout   CallEnd = C.WOVYR_CEND_TIMEOUT
	CallCancelled CallEnd = C.WOVYR_CEND_CANCELLED
	CallOutOfFuel CallEnd = C.WOVYR_CEND_OUT_OF_FUEL
	CallNoFunc    CallEnd = C.WOVYR_CEND_NO_FUNC
	CallBadArgs   CallEnd = C.WOVYR_CEND_BAD_ARGS
)

func (e CallEnd) String() string {
	switch e {
	case CallOK:
		return "ok"
	case CallTrap:
		return "trap"
	case CallTimeout:
		return "timeout"
	case CallCancelled:
		return "cancelled"
	case CallOutOfFuel:
		return "out-of-fuel"
	case CallNoFunc:
		return "no-func"
	case CallBadArgs:
		return "bad-args"
	}
	return fmt.Sprintf("end(%d)", int(e))
}

// ErrPoisoned is returned by Call on an instance whose earlier call did not
// end OK: after a trap the component model forbids re-entering it, and
// after a timeout its state is whatever the guest left half done.
var ErrPoisoned = errors.New("wasmcapi: component instance is poisoned by an earlier failed call")

// Limits bound one instance (store).
type Limits struct {
	Memory int64 // linear memory bytes per store; <= 0: the pool slot size
	Tables int64 // table elements per store; <= 0: the pool limit
}

// Instance is one component instance in a store of its own. It is not safe
// for concurrent use: one call at a time.
type Instance struct {
	comp     *Component
	ptr      *C.wovyr_cinst
	poisoned bool
	host     *instHost  // nil when the linker defines no host functions
	handle   cgo.Handle // host's, as the store knows it
	handles  map[uint64]*held
	bufs     *callBufs
}

// callBufs is an instance's memory for a call's C record, its encoded
// arguments and its result, made once (an instance makes one call at a
// time). It is C memory: cgo checks every Go pointer a call passes for
// the Go pointers it may hold, and the record has pointer fields.
type callBufs struct {
	call C.wovyr_ccall
	enc  [256]byte
	out  [256]byte
}

// Instantiate makes a fresh instance of c, linked by l, in a new store.
func (l *Linker) Instantiate(c *Component, lim Limits) (*Instance, error) {
	mem, tab := C.int64_t(-1), C.int64_t(-1)
	if lim.Memory > 0 {
		mem = C.int64_t(lim.Memory)
	}
	if lim.Tables > 0 {
		tab = C.int64_t(lim.Tables)
	}
	wasi := C.int(0)
	if l.wasi {
		wasi = 1
	}
	in := &Instance{comp: c}
	var handle C.uintptr_t
	if l.hosts {
		in.host = &instHost{}
		in.handle = cgo.NewHandle(in.host)
		handle = C.uintptr_t(in.handle)
	}
	var msg *C.char
	p := C.wovyr_cinst_new(l.engine.ptr, l.ptr, c.ptr, mem, tab, wasi, handle, &msg)
	if p == nil {
		in.Close()
		if msg == nil {
			return nil, errors.New("wasmcapi: component instantiation failed")
		}
		defer C.free(unsafe.Pointer(msg))
		return nil, newError(C.GoString(msg))
	}
	in.ptr = p
	return in, nil
}

// CallSpec bounds one call. The zero value is unmetered and has no deadline.
type CallSpec struct {
	Fuel uint64        // zero: unmetered
	Wall time.Duration // zero: no deadline; cancellation still works
}

// CallResult is what a call produced.
type CallResult struct {
	End      CallEnd
	Result   *Val // nil when the function returns nothing or the call failed
	Message  string
	FuelUsed uint64
	Took     time.Duration

	result Val
}

// Call calls f with args, which must already match f's parameter types
// (package plugin checks them against the types). Any end but CallOK
// poisons the instance. The engine's epoch ticker must run for Wall and
// cancellation to act.
func (in *Instance) Call(ctx context.Context, f *Export, args []Val, s CallSpec) (*CallResult, error) {
	if in.poisoned {
		return nil, ErrPoisoned
	}
	if len(args) != len(f.Type.Params) {
		return nil, fmt.Errorf("wasmcapi: %s takes %d arguments, got %d", f.Name, len(f.Type.Params), len(args))
	}
	if f.resources {
		if err := in.checkHandles(f, args); err != nil {
			return nil, err
		}
	}
	if in.bufs == nil {
		in.bufs = (*callBufs)(C.calloc(1, C.size_t(unsafe.Sizeof(callBufs{}))))
	}
	b := in.bufs
	b.call = C.wovyr_ccall{}
	call := &b.call
	enc := encodeVals(b.enc[:0], args, in)
	call._func = f.idx
	call.args_len, call.nargs = C.size_t(len(enc)), C.size_t(len(args))
	if f.Type.Result != nil {
		call.has_result = 1
	}
	call.fuel = C.uint64_t(s.Fuel)
	call.wall_ns = C.uint64_t(s.Wall.Nanoseconds())
	defer in.disarm(in.arm(ctx))
	C.wovyr_cinst_call(in.ptr, call, (*C.uint8_t)(unsafe.Pointer(unsafe.SliceData(enc))),
		(*C.uint8_t)(unsafe.Pointer(&b.out[0])), C.size_t(len(b.out)))
	if f.resources {
		in.release()
	}

	if call.result != nil {
		defer C.free(unsafe.Pointer(call.result))
	}
	r := in.ended(call)
	if r.End != CallOK {
		return r, nil
	}
	if call.has_result != 0 {
		var res []byte
		if call.result != nil { // it did not fit in out
			res = unsafe.Slice((*byte)(unsafe.Pointer(call.result)), int(call.result_len))
		} else {
			res = b.out[:call.result_len:call.result_len]
		}
		var err error
		if r.result, err = decodeVal(res, in); err != nil {
			in.poisoned = true
			return nil, err
		}
		in.typeHandles(f.Type.Result, &r.result)
		r.Result = &r.result // one allocation for both
	}
	return r, nil
}

// ended reads how call ended (freeing its message); any end but CallOK
// poisons the instance.
func (in *Instance) ended(call *C.wovyr_ccall) *CallResult {
	r := &CallResult{End: CallEnd(call.end), FuelUsed: uint64(call.fuel_used), Took: time.Duration(call.call_ns)}
	if call.message != nil {
		r.Message = oneLine(C.GoString(call.message))
		C.free(unsafe.Pointer(call.message))
		call.message = nil
	}
	if r.End != CallOK {
		in.poisoned = true
	}
	return r
}

// arm readies the instance for a call under ctx: cancellation reaches the
// epoch callback, and host functions see ctx. Pass what it returns to
// disarm when the call is over.
func (in *Instance) arm(ctx context.Context) (stop func() bool) {
	in.ptr.cancel = 0
	if ctx.Done() != nil {
		cancel := (*int32)(unsafe.Pointer(&in.ptr.cancel))
		stop = context.AfterFunc(ctx, func() { atomic.StoreInt32(cancel, 1) })
	}
	if in.host != nil {
		in.host.ctx = ctx
	}
	return stop
}

func (in *Instance) disarm(stop func() bool) {
	if stop != nil {
		stop()
	}
	if in.host != nil {
		in.host.ctx = nil
	}
}

// Poisoned reports whether a failed call has made the instance unusable.
func (in *Instance) Poisoned() bool { return in.poisoned }

// Close frees the instance and its store. It is idempotent.
func (in *Instance) Close() {
	if in.ptr != nil {
		C.wovyr_cinst_delete(in.ptr)
		in.ptr = nil
		in.handles = nil
	}
	if in.bufs != nil {
		C.free(unsafe.Pointer(in.bufs))
		in.bufs = nil
	}
	if in.host != nil {
		in.handle.Delete()
		in.host = nil
	}
}

// roundTrip passes vals through Wasmtime's own value representation and
// back (the codec's test).
func roundTrip(vals []Val) ([]Val, error) {
	enc := encodeVals(nil, vals, nil)
	var out *C.uint8_t
	var n C.size_t
	in := C.CBytes(append(enc, 0)) // never empty
	defer C.free(in)
	ok := C.wovyr_cval_roundtrip((*C.uint8_t)(in), C.size_t(len(enc)), C.size_t(len(vals)), &out, &n)
	defer C.free(unsafe.Pointer(out))
	if ok == 0 {
		return nil, errCodec
	}
	r := reader{b: C.GoBytes(unsafe.Pointer(out), C.int(n))}
	res := make([]Val, len(vals))
	for i := range res {
		v, err := r.val(0)
		if err != nil {
			return nil, err
		}
		res[i] = v
	}
	return res, nil
}
