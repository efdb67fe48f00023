// Command consumer stands for a user's module that embeds fencekit's library: it imports every public
// package (api/v1alpha1 and pkg/...), nothing else. Its go.mod is what such a module needs while fencekit is
// not published: a require of v0.0.0 and a replace to a local clone. test/snippets builds the documentation's
// Go snippets and the examples in a copy of this module, and bounds the modules it inherits.
package main

import (
	_ "github.com/fencekit/fencekit/api/v1alpha1"
	_ "github.com/fencekit/fencekit/pkg/elector"
	_ "github.com/fencekit/fencekit/pkg/fencing"
	_ "github.com/fencekit/fencekit/pkg/fencing/httpfence"
	_ "github.com/fencekit/fencekit/pkg/fencing/sqlfence"
	_ "github.com/fencekit/fencekit/pkg/managed"
)

func main() {}
