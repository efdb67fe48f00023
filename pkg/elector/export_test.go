package elector

import "context"

// DeclaredForTest is an AcquireFence that runs hook and declares fences, for the tests of the Lease
// policy's rules on declarations (pkg/fencing builds the real ones).
func DeclaredForTest(hook func(context.Context, Token) error, fences Fences) AcquireFence {
	return AcquireFence{raises: []func(context.Context, Token) error{hook}, fences: fences}
}
