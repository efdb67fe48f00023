// Command fencekit is the fencekit CLI:
//
//	fencekit run          run a command only while leading a Lease, with the fencing token in its environment
//	fencekit elect        the token sidecar: elect on a Lease and serve the token over localhost HTTP and a file
//	fencekit selftest     the Helm chart's `helm test`: a stale write refused by the webhook, a current one admitted
//
// It only parses flags and wires; the work is done in internal/leadrun.
package main

import (
	"fmt"
	"os"

	"github.com/fencekit/fencekit/internal/version"
)

func usage() {
	fmt.Fprint(os.Stderr, `Usage: fencekit <command> [flags]

Commands:
  run          run a command only while leading a Lease (fencekit run --lease NAME -- CMD ARGS...), with
               FENCEKIT_EPOCH in its environment; SIGTERM at the safe-work deadline or on lost leadership
  elect        the token sidecar: elect on a Lease and serve the current token on localhost (--serve) and in
               a file (--token-file); readiness is leadership
  selftest     check an installation (the chart's helm test): elect twice on a Lease, and see the write with
               the previous epoch refused by the webhook and the one with the current epoch admitted
  version      print the version

Run 'fencekit <command> -h' for a command's flags.
`)
}

func main() {
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "run":
		err = runCommand(os.Args[2:])
	case "elect":
		err = runElect(os.Args[2:])
	case "selftest":
		err = runSelftest(os.Args[2:])
	case "version":
		fmt.Printf("fencekit %s (%s)\n", version.Version, version.Commit)
	case "-h", "--help", "help":
		usage()
	default:
		fmt.Fprintf(os.Stderr, "fencekit: unknown command %q\n\n", os.Args[1])
		usage()
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "fencekit %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}
