module github.com/wovyr/wovyr

go 1.26.0

require (
	github.com/moby/profiles/seccomp v0.3.0
	github.com/opencontainers/runtime-spec v1.3.0
	golang.org/x/sys v0.50.0
)
