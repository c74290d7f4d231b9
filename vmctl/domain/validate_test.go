package domain

import (
	"errors"
	"strings"
	"testing"
)

func TestValidateOK(t *testing.T) {
	if err := validSpec().Validate(); err != nil {
		t.Fatalf("valid spec rejected: %v", err)
	}
}

func TestValidateErrors(t *testing.T) {
	long := "/" + strings.Repeat("s", MaxUnixSocketPath)
	for _, tc := range []struct {
		name   string
		mutate func(*Spec)
		want   string // substring of the error
	}{
		{"empty name", func(s *Spec) { s.Name = "" }, "Name: is empty"},
		{"name with space", func(s *Spec) { s.Name = "bad name" }, `Name: "bad name" is not a valid domain name`},
		{"name leading dash", func(s *Spec) { s.Name = "-x" }, "Name:"},
		{"name too long", func(s *Spec) { s.Name = strings.Repeat("a", 64) }, "Name:"},
		{"name with slash", func(s *Spec) { s.Name = "a/b" }, "Name:"},
		{"bad uuid", func(s *Spec) { s.UUID = "not-a-uuid" }, "UUID:"},
		{"missing sandbox id", func(s *Spec) { s.SandboxID = "" }, "SandboxID: is empty"},
		{"sandbox id with newline", func(s *Spec) { s.SandboxID = "a\nb" }, "SandboxID:"},
		{"image with space", func(s *Spec) { s.Image = "a b" }, "Image:"},
		{"missing type", func(s *Spec) { s.Type = "" }, "Type: is empty"},
		{"unknown type", func(s *Spec) { s.Type = "xen" }, `Type: "xen" is not supported`},
		{"bad machine", func(s *Spec) { s.Machine = "pc;rm" }, "Machine:"},
		{"zero vcpus", func(s *Spec) { s.VCPUs = 0 }, "VCPUs: 0 is out of range"},
		{"too many vcpus", func(s *Spec) { s.VCPUs = MaxVCPUs + 1 }, "VCPUs:"},
		{"zero memory", func(s *Spec) { s.MemoryMiB = 0 }, "MemoryMiB: 0 MiB is out of range"},
		{"tiny memory", func(s *Spec) { s.MemoryMiB = 8 }, "MemoryMiB:"},
		{"missing kernel", func(s *Spec) { s.Kernel = "" }, "Kernel: is empty"},
		{"relative kernel", func(s *Spec) { s.Kernel = "vmlinuz" }, `Kernel: "vmlinuz" is not absolute`},
		{"unclean initrd", func(s *Spec) { s.Initrd = "/a/../b" }, "Initrd:"},
		{"missing disk", func(s *Spec) { s.Disk = "" }, "Disk: is empty"},
		{"missing console log", func(s *Spec) { s.ConsoleLog = "" }, "ConsoleLog: is empty"},
		{"missing agent socket", func(s *Spec) { s.AgentSocket = "" }, "AgentSocket: is empty"},
		{"agent socket too long", func(s *Spec) { s.AgentSocket = long }, "AgentSocket: is 108 bytes long"},
		{"guest agent socket relative", func(s *Spec) { s.GuestAgentSocket = "qga.sock" }, "GuestAgentSocket:"},
		{"same sockets", func(s *Spec) { s.GuestAgentSocket = s.AgentSocket }, "GuestAgentSocket: is the same path"},
		{"missing agent port", func(s *Spec) { s.AgentPort = "" }, "AgentPort: is empty"},
		{"bad agent port", func(s *Spec) { s.AgentPort = "a b" }, "AgentPort:"},
		{"reserved agent port", func(s *Spec) { s.AgentPort = GuestAgentPort }, "reserved"},
		{"cmdline newline", func(s *Spec) { s.Cmdline = "a\nb" }, "Cmdline:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := validSpec()
			tc.mutate(&s)
			err := s.Validate()
			if err == nil {
				t.Fatal("Validate accepted the spec")
			}
			if !errors.Is(err, ErrInvalidSpec) {
				t.Errorf("error does not wrap ErrInvalidSpec: %v", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not contain %q", err, tc.want)
			}
		})
	}
}

func TestValidateReportsAllProblems(t *testing.T) {
	err := Spec{}.Validate()
	if err == nil {
		t.Fatal("zero Spec accepted")
	}
	for _, field := range []string{"Name", "SandboxID", "Type", "VCPUs", "MemoryMiB", "Kernel", "Disk", "ConsoleLog", "AgentSocket", "AgentPort"} {
		if !strings.Contains(err.Error(), field+":") {
			t.Errorf("error does not mention %s: %v", field, err)
		}
	}
}
