// Package seal holds the key that lets pkg/fencing, and no code outside fencekit's pkg/, build an
// elector.AcquireFence that declares what it raises (elector.DeclaredFence). Go refuses an import of this
// package from outside pkg/, and no value of its type can be written without it, so a fence-on-acquire
// declaration always comes with the hook that raises what it declares.
package seal

// Key is DeclaredFence's first parameter. Its blank field, which Go keeps apart by package, makes its type
// one that no other package can spell, not even as an anonymous struct.
type Key struct{ _ [0]func() }
