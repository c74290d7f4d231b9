package main

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/agentbox/agentbox/vmctl/accel"
)

func accelCommand() *cli.Command {
	return &cli.Command{
		Name:  "accel",
		Usage: "print which accelerator --accel auto would choose here, and why",
		Action: func(c *cli.Context) error {
			choice, err := accel.Choose(accel.ModeAuto, nil)
			if err != nil {
				return err
			}
			fmt.Printf("%s\t%s\n", choice.Accel, choice.Reason)
			return nil
		},
	}
}
