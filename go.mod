module github.com/wovyr/wovyr

go 1.26

require github.com/bytecodealliance/wasmtime-go/v39 v39.0.1
