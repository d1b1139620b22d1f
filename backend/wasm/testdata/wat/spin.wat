;; spin: an infinite loop with no imports (battery probe 55's guest).
(module
  (func (export "_start") (loop $l (br $l))))
