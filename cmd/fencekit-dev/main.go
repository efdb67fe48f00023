// Command fencekit-dev holds fencekit's development commands, which need the repository and a local control
// plane (envtest) and so are kept out of the fencekit CLI that users ship in their images:
//
//	fencekit-dev devcluster   start a local control plane with fencekit installed and run the operator against it (make run)
//	fencekit-dev demo         the paused lock holder, fenced and unfenced (make demo)
//
// It only parses flags and wires; the work is done in internal/dev/devcluster and internal/demo.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
)

// exitUsage is the exit status of a usage error (sysexits.h EX_USAGE), as in fencekit.
const exitUsage = 64

const usage = `Usage: fencekit-dev <command> [flags]

fencekit's development commands; they need the fencekit repository.

Commands:
  devcluster   start a local control plane with fencekit's CRDs and admission installed, run the operator
               against it and print the kubeconfig path; Ctrl-C stops everything (make run)
  demo         show the paused lock holder: a stale write refused by fencekit, and accepted without it
               (make demo)

Run 'fencekit-dev <command> --help' for a command's flags.
`

// usageError is an error the command line caused: fencekit-dev exits with exitUsage.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

// flagSet is a command's flags with its synopsis, which --help prints to stdout.
type flagSet struct {
	*flag.FlagSet
	synopsis, short string
}

func newFlagSet(name, synopsis, short string) *flagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // parse reports errors in one line; --help prints to stdout
	fs.Usage = func() {}
	return &flagSet{FlagSet: fs, synopsis: synopsis, short: short}
}

// parse parses args; --help prints the help and is flag.ErrHelp (exit 0), a bad flag a usage error.
func parse(fs *flagSet, args []string) error {
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fmt.Printf("Usage: %s\n\n%s\n\nFlags:\n", fs.synopsis, fs.short)
		fs.SetOutput(os.Stdout)
		fs.PrintDefaults()
		return flag.ErrHelp
	case err != nil:
		return &usageError{fmt.Sprintf("%v (see 'fencekit-dev %s --help')", err, fs.Name())}
	case fs.NArg() > 0:
		return &usageError{fmt.Sprintf("unexpected argument %q (see 'fencekit-dev %s --help')", fs.Arg(0), fs.Name())}
	}
	return nil
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(exitUsage)
	}
	var err error
	switch os.Args[1] {
	case "devcluster":
		err = runDevcluster(os.Args[2:])
	case "demo":
		err = runDemo(os.Args[2:])
	case "-h", "--help", "help":
		fmt.Print(usage)
		return
	default:
		fmt.Fprintf(os.Stderr, "fencekit-dev: unknown command %q (want devcluster or demo; see 'fencekit-dev --help')\n", os.Args[1])
		os.Exit(exitUsage)
	}
	var ue *usageError
	switch {
	case errors.Is(err, flag.ErrHelp):
	case errors.As(err, &ue):
		fmt.Fprintf(os.Stderr, "fencekit-dev %s: %v\n", os.Args[1], ue)
		os.Exit(exitUsage)
	case err != nil:
		fmt.Fprintf(os.Stderr, "fencekit-dev %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}
