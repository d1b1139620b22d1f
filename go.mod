module github.com/wovyr/wovyr

go 1.26.0

require (
	github.com/google/go-containerregistry v0.22.1 // indirect
	github.com/moby/profiles/seccomp v0.3.0 // indirect
	github.com/opencontainers/runtime-spec v1.3.0 // indirect
	golang.org/x/sys v0.50.0 // indirect
)
