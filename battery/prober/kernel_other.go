//go:build !(linux && amd64)

package prober

// kernelProbes exist only on linux/amd64, where their raw syscall numbers
// are known.
func kernelProbes() map[string]Func { return nil }
