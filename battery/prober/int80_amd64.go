package prober

// int80 makes a 32-bit system call through int 0x80 (i386 numbers and
// 32-bit arguments) and returns the raw result (-errno on failure).
func int80(trap, a1, a2, a3 uintptr) uintptr
