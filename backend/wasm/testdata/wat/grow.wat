;; grow: grows memory one page at a time until memory.grow returns -1, then
;; exits with the number of pages it reached.
(module
  (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
  (memory (export "memory") 1)
  (func (export "_start")
    (block $done
      (loop $l
        (br_if $done (i32.eq (memory.grow (i32.const 1)) (i32.const -1)))
        (br $l)))
    (call $exit (memory.size))))
