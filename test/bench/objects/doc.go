// Package objects measures what fencing an ordinary object costs: a merge patch of a ConfigMap declared by
// a FencingPolicy (through fencing.NewClient, the object webhook served by the operator in process) next to
// the same patch of a ConfigMap in an undeclared namespace, by the same user, in the same run.
package objects
