package elector

import (
	"context"
	"fmt"

	"github.com/fencekit/fencekit/pkg/internal/seal"
	"github.com/fencekit/fencekit/pkg/protocol"
)

// AcquireFence is what an acquisition does before leadership is reported (Config.PostAcquire): a raise,
// which runs after each acquisition and before OnStartedLeading, and the declaration of what that raise
// fences, written on the Lease (annotation fencing.fencekit.io/fences) in the same acquisition.
//
// The two come as one value, and only pkg/fencing builds one that declares something: fencing.FenceOnAcquire
// (every FencedResource bound to the Lease) and fencing.FenceObjectsOnAcquire (every object a FencingPolicy
// binds to it), and their ForConfig forms. fencekit's admission trusts a declaration (it then decides a write
// at the Lease's current epoch from its watch-fed copy of the Lease instead of a quorum read), so a
// declaration without the raise it names would let a paused former holder's write through; no code outside
// fencekit's pkg/ can write one. AcquireHook runs any other hook and declares nothing; JoinFences runs
// several and declares what they all declare. The zero AcquireFence does nothing.
type AcquireFence struct {
	raises []func(ctx context.Context, t Token) error
	fences protocol.Fences
}

// DeclaredFence is the constructor pkg/fencing uses: raise, declared as fencing fences. Its first parameter's
// type is internal to fencekit's pkg/, so no other code can call it.
func DeclaredFence(_ seal.Key, raise func(ctx context.Context, t Token) error, fences protocol.Fences) AcquireFence {
	return AcquireFence{raises: []func(context.Context, Token) error{raise}, fences: fences}
}

// AcquireHook is an AcquireFence that runs hook and declares nothing: fencekit's admission reads the Lease
// with a quorum read for each fenced write, as for an elector without a fence. A nil hook does nothing, and
// still counts as set (package managed reads it as "fence nothing on acquire").
func AcquireHook(hook func(ctx context.Context, t Token) error) AcquireFence {
	if hook == nil {
		hook = func(context.Context, Token) error { return nil }
	}
	return AcquireFence{raises: []func(context.Context, Token) error{hook}}
}

// JoinFences runs each of fs in turn, stopping at the first error, and declares every kind any of them
// declares.
func JoinFences(fs ...AcquireFence) AcquireFence {
	var out AcquireFence
	for _, f := range fs {
		out.raises = append(out.raises, f.raises...)
		out.fences.FencedResources = out.fences.FencedResources || f.fences.FencedResources
		out.fences.Objects = out.fences.Objects || f.fences.Objects
	}
	return out
}

// Observe returns f with observe called around its raise: before it, with the raise's context and token,
// and then the function observe returns with the raise's result. The raise itself always runs, so the
// declaration stays true.
func (f AcquireFence) Observe(observe func(ctx context.Context, t Token) (done func(error))) AcquireFence {
	raise := f.Raise
	return AcquireFence{fences: f.fences, raises: []func(context.Context, Token) error{func(ctx context.Context, t Token) error {
		done := observe(ctx, t)
		err := raise(ctx, t)
		if done != nil {
			done(err)
		}
		return err
	}}}
}

// Fences is what f declares on the Lease.
func (f AcquireFence) Fences() protocol.Fences { return f.fences }

// IsZero reports whether f does nothing (the zero AcquireFence).
func (f AcquireFence) IsZero() bool { return len(f.raises) == 0 && f.fences == (protocol.Fences{}) }

// Raise runs f's hooks in turn with t, as the elector does after acquiring at t, turning a panic into an
// error. Tests that write Leases by hand call it to fence as an elector would.
func (f AcquireFence) Raise(ctx context.Context, t Token) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("PostAcquire panicked: %v", p)
		}
	}()
	for _, h := range f.raises {
		if err := h(ctx, t); err != nil {
			return err
		}
	}
	return nil
}
