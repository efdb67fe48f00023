package main

import "errors"

func runDemo(args []string) error {
	return errors.New("the demo is not built yet: run 'make run' for a local control plane with the operator")
}
