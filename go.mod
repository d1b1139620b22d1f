module github.com/wovyr/wovyr

go 1.26.0

require (
	github.com/bytecodealliance/wasmtime-go/v39 v39.0.1
	go.etcd.io/bbolt v1.5.0
	golang.org/x/sync v0.25.0
	golang.org/x/sys v0.50.0
)
