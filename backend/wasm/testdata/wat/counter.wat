;; counter: increments a word in memory and a global, then exits with both
;; (memory*16 + global). A fresh instance always exits 17; a reused one more.
;; The word starts from a data segment (value 0), so CoW images are covered.
(module
  (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
  (memory (export "memory") 1)
  (global $g (mut i32) (i32.const 0))
  (data (i32.const 64) "\00\00\00\00")
  (func (export "_start")
    (i32.store (i32.const 64) (i32.add (i32.load (i32.const 64)) (i32.const 1)))
    (global.set $g (i32.add (global.get $g) (i32.const 1)))
    (call $exit (i32.add (i32.mul (i32.load (i32.const 64)) (i32.const 16)) (global.get $g)))))
