// Package resource is the resource vector shared by invocations, pools and the
// scheduler. It is a vector from the start — CPU, memory and GPU — so that GPUs
// join the same fairness and admission model later without a new type.
package resource

import "fmt"

// Vector is an amount of each schedulable resource. The zero Vector is "nothing".
type Vector struct {
	CPUMillis   int64 `json:"cpu_millis,omitempty"`   // thousandths of a core
	MemoryBytes int64 `json:"memory_bytes,omitempty"` // bytes of RAM
	GPU         int64 `json:"gpu,omitempty"`          // whole GPU units
}

// Add returns v+o.
func (v Vector) Add(o Vector) Vector {
	return Vector{v.CPUMillis + o.CPUMillis, v.MemoryBytes + o.MemoryBytes, v.GPU + o.GPU}
}

// Sub returns v-o.
func (v Vector) Sub(o Vector) Vector {
	return Vector{v.CPUMillis - o.CPUMillis, v.MemoryBytes - o.MemoryBytes, v.GPU - o.GPU}
}

// Fits reports whether v fits within free in every dimension.
func (v Vector) Fits(free Vector) bool {
	return v.CPUMillis <= free.CPUMillis && v.MemoryBytes <= free.MemoryBytes && v.GPU <= free.GPU
}

// Negative reports whether any dimension is below zero.
func (v Vector) Negative() bool {
	return v.CPUMillis < 0 || v.MemoryBytes < 0 || v.GPU < 0
}

// IsZero reports whether every dimension is zero.
func (v Vector) IsZero() bool { return v == Vector{} }

func (v Vector) String() string {
	return fmt.Sprintf("{cpu=%dm mem=%dB gpu=%d}", v.CPUMillis, v.MemoryBytes, v.GPU)
}

// DominantShare is v's largest fraction of capacity over the dimensions
// capacity has (DRF's dominant share): 0 for nothing, 1 for all of one.
func (v Vector) DominantShare(capacity Vector) float64 {
	var s float64
	for _, d := range [][2]int64{{v.CPUMillis, capacity.CPUMillis}, {v.MemoryBytes, capacity.MemoryBytes}, {v.GPU, capacity.GPU}} {
		if d[1] > 0 {
			s = max(s, float64(d[0])/float64(d[1]))
		}
	}
	return s
}
