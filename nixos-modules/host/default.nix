# agentbox host module: services.agentbox runs `agentbox serve` next to
# libvirtd. Split by concern: options, assertions, the service.
{
  imports = [
    ./options.nix
    ./assertions.nix
    ./service.nix
  ];
}
