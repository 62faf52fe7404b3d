package main

import (
	"context"
	"fmt"

	"github.com/llmserve/llmserve/ipc"
	"github.com/urfave/cli/v3"
)

// keygenCommand writes a fresh CURVE keypair for an engine whose processes span hosts: every
// process of the engine is given the same directory (--curve-keys; a Kubernetes Secret).
func keygenCommand() *cli.Command {
	return &cli.Command{
		Name:      "keygen",
		Usage:     "write a CURVE keypair (curve.pub, curve.key) into DIR for --curve-keys",
		ArgsUsage: "DIR",
		Action: func(_ context.Context, c *cli.Command) error {
			if c.NArg() != 1 {
				return fmt.Errorf("keygen: want one argument, the directory to write the keys into")
			}
			dir := c.Args().First()
			k, err := ipc.NewCurveKeys()
			if err != nil {
				return err
			}
			if err := ipc.WriteCurveKeys(dir, k); err != nil {
				return err
			}
			fmt.Printf("wrote %s/%s (secret, 0600) and %s/%s; give every process of the engine --curve-keys %s\n",
				dir, ipc.CurveSecretFile, dir, ipc.CurvePublicFile, dir)
			return nil
		},
	}
}
