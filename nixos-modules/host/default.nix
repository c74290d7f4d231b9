# agentbox host module: services.agentbox runs `agentbox serve` next to
# libvirtd. Split by concern: options, assertions, the service, the host
# firewall's rules for the sandboxes' taps.
{
  imports = [
    ./options.nix
    ./assertions.nix
    ./service.nix
    ./firewall.nix
  ];
}
