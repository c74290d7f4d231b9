# agentbox guest module: makes a NixOS configuration an agentbox sandbox and
# builds it into an image (config.system.build.agentboxImage). Split by
# concern: options, assertions, the agent service, boot, network, users and
# the image. Enable with agentbox.guest.enable = true (lib.mkProfile does).
{
  imports = [
    ./options.nix
    ./assertions.nix
    ./agent.nix
    ./boot.nix
    ./network.nix
    ./users.nix
    ./image.nix
  ];
}
