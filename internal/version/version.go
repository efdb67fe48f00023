// Package version holds the build's version and commit, set with -ldflags -X by the Makefile and the Dockerfile.
package version

var (
	// Version is the fencekit release, or "dev".
	Version = "dev"
	// Commit is the git commit the binary was built from.
	Commit = "unknown"
)
