package elector_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestAcquireFenceDeclarationIsSealed: user code (a module of its own that requires fencekit) cannot write a
// fence-on-acquire declaration without the raise it names. The program below tries each way and the Go
// compiler refuses each, with these errors: the old pair of fields is gone, AcquireFence's fields cannot be
// set, the key DeclaredFence needs cannot be imported, nor spelled as an anonymous struct.
func TestAcquireFenceDeclarationIsSealed(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write := func(name, content string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	write("go.sum", string(sum))
	write("go.mod", "module example.com/user\n\ngo 1.26\n\nrequire github.com/fencekit/fencekit v0.0.0\n\nreplace github.com/fencekit/fencekit => "+root+"\n")
	// Two packages: Go stops type-checking a package at a refused import, so the import has its own.
	if err := os.Mkdir(filepath.Join(dir, "key"), 0o755); err != nil {
		t.Fatal(err)
	}
	write("key/key.go", `package key

import "github.com/fencekit/fencekit/pkg/internal/seal"

var _ = seal.Key{}
`)
	write("main.go", `package main

import (
	"context"

	"github.com/fencekit/fencekit/pkg/elector"
	"github.com/fencekit/fencekit/pkg/protocol"
)

func noop(context.Context, elector.Token) error { return nil }

func main() {
	objects := protocol.Fences{Objects: true}
	_ = elector.Config{PostAcquire: elector.AcquireHook(noop), PostAcquireFences: objects}
	_ = elector.AcquireFence{fences: objects}
	_ = elector.DeclaredFence(struct{ _ [0]func() }{}, noop, objects)
}
`)
	var out []byte
	for _, pkg := range []string{"./key", "."} {
		cmd := exec.Command("go", "build", "-mod=mod", "-o", os.DevNull, pkg)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOFLAGS=", "GOPROXY=off", "GOWORK=off")
		o, err := cmd.CombinedOutput()
		if err == nil {
			t.Errorf("package %s, which writes a fence-on-acquire declaration without its raise, compiled:\n%s", pkg, o)
		}
		out = append(out, o...)
	}
	t.Logf("go build:\n%s", out)
	for _, want := range []string{
		"use of internal package github.com/fencekit/fencekit/pkg/internal/seal not allowed",
		"unknown field PostAcquireFences in struct literal of type elector.Config",
		"cannot refer to unexported field fences in struct literal of type elector.AcquireFence",
		"cannot use struct{_ [0]func()}{} (value of type struct{_ [0]func()}) as seal.Key value in argument to elector.DeclaredFence",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("go build's errors do not say %q:\n%s", want, out)
		}
	}
}
