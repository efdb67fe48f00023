package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/fencekit/fencekit/internal/dev/devcluster"
)

func runDevcluster(args []string) error {
	fs := newFlagSet("devcluster", "fencekit-dev devcluster [--repo DIR] [--manager BIN]",
		"Start a local control plane with fencekit's CRDs and admission installed, run the operator against it and\nprint the kubeconfig path; Ctrl-C stops everything.")
	repo := fs.String("repo", ".", "The fencekit repository (for config/).")
	manager := fs.String("manager", "bin/manager", "The manager binary to run against the control plane; empty runs none.")
	if err := parse(fs, args); err != nil {
		return err
	}
	root, err := filepath.Abs(*repo)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	assets, err := devcluster.AssetsDir(root, false)
	if err != nil {
		return err
	}
	fmt.Fprintln(os.Stderr, "starting the local control plane from", assets)
	cluster, err := devcluster.Start(ctx, devcluster.Options{RepoRoot: root, AssetsDir: assets, Webhooks: true})
	if err != nil {
		return err
	}
	defer func() {
		fmt.Fprintln(os.Stderr, "stopping the local control plane")
		if err := cluster.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping the control plane:", err)
		}
	}()
	fmt.Printf("control plane ready; CRDs and admission installed.\n\n  export KUBECONFIG=%s\n  kubectl apply -k config/samples\n\nCtrl-C stops everything.\n", cluster.Kubeconfig)

	if *manager == "" {
		<-ctx.Done()
		return nil
	}
	cmd := exec.Command(*manager, cluster.ManagerArgs()...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	// Its own process group, so that it is stopped by us, after it, and not by the terminal's Ctrl-C first.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", *manager, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return fmt.Errorf("the manager exited: %w", err)
	case <-ctx.Done():
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		if err := <-done; err != nil {
			var exit *exec.ExitError
			if !errors.As(err, &exit) {
				return err
			}
		}
		return nil
	}
}
