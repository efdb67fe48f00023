// Package model checks fencekit's protocol model (model, docs/model.md) with spin, the checks that are not
// marked slow: the design must verify, and spin must refute each mutation and each residual with a trail
// that tells the story. It needs spin (Debian package spin, which needs gcc); `make model` runs the slow
// checks too.
package model
