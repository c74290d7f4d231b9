package host

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"log/slog"
	"net/netip"
	"time"

	"github.com/agentbox/agentbox/vmctl/accel"
	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/cluster"
	"github.com/agentbox/agentbox/vmctl/daemon"
	"github.com/agentbox/agentbox/vmctl/mcp"
	"github.com/agentbox/agentbox/vmctl/sandbox"
	"github.com/agentbox/agentbox/vmctl/sandbox/warm"
	"github.com/agentbox/agentbox/vmctl/tenant"
)

// Options is what a host is started with (Start). `agentbox serve` fills
// it from its flags (serveOptions, cmd/agentbox/serve.go); `agentbox run
// --local` and `agentbox mcp --local` set Local (startLocal,
// cmd/agentbox/local.go); all three take the first block from the global
// flags through one function (hostOptions, cmd/agentbox/local.go). Values
// arrive parsed: flags are checked and files read by the caller, so a
// flag's mistake is reported before anything starts; errors of what
// Start itself does still name the flag (e.g. "--policy: …"). A field's
// zero value is its default unless its comment says otherwise.
//
// A new daemon setting touches three places and no others:
//  1. its flag, in cmd/agentbox/serve.go (or the file of its flag group),
//     and the line of serveOptions there that copies it into Options;
//  2. a field here, with its unit and default;
//  3. the place in this package that uses it: daemonConfig (host.go) for
//     a daemon.Config setting, else the step of Start that needs it.
type Options struct {
	// URI is the libvirt URI, e.g. qemu:///system. Required.
	URI string
	// LibvirtSocket is libvirtd's socket path; "" derives it from URI.
	LibvirtSocket string
	// StateDir is the agentbox state dir (store, audit log, overlays,
	// console logs; a local host's run under StateDir/local/RUN-ID, see
	// rundir.go). Required; a relative path is taken from the working
	// directory.
	StateDir string
	// RuntimeDir holds the agents' unix sockets (a local host's under
	// RuntimeDir/local-RUN-ID). Required; relative as StateDir.
	RuntimeDir string
	// Logger receives the host's structured logs; nil discards them.
	Logger *slog.Logger
	// Version is the agentbox version the daemon's Info reports.
	Version string
	// Say, when set, is told each line meant for the person who started
	// the host, as it happens and without a prefix (serve prints
	// "agentbox serve: LINE", run --local "agentbox: LINE"): what the
	// sweep of killed in-process runs removed (Sweep), and for serve the
	// cluster joined and a note about the E2B templates. nil: not said.
	Say func(line string)
	// Local, when set, makes a local host (run --local, mcp --local):
	// one run's state, an in-memory listener reached through
	// Host.Client, domains that die with the process. The fields after
	// it are serve's and ignored then, except ShutdownTimeout.
	Local *LocalOptions

	// Socket is the unix socket the API listens on (mode 0660), unless
	// systemd passed listeners (socket activation, which then replaces
	// Socket and ListenTCP). Required without socket activation.
	Socket string
	// SocketGroup is the group, by name or number, that may use Socket;
	// "": the daemon's own group.
	SocketGroup string
	// ListenTCP is a host:port the API also serves on; "": none. It
	// needs Auth.Token, Auth.TLS or Auth.Tenants (apiserver.CheckTCP,
	// checked before any listener is made).
	ListenTCP string
	// Auth holds the secrets the fronts check, as one keyring (auth.go).
	Auth Auth
	// Templates builds the daemon's named templates (serve --template)
	// once the listeners are held and before libvirt is connected, so a
	// second daemon on the same socket fails before a nix build; nil:
	// none. Its error stops Start.
	Templates func(ctx context.Context) ([]daemon.Template, error)
	// Network is the sandboxes' network (vmctl/network).
	Network NetworkOptions
	// Policy is the policy plugin asked before every create, command,
	// file operation, port forward and network policy.
	Policy PolicyOptions
	// QEMUUsers, if set, runs every sandbox's QEMU as a uid of its own
	// from the range (serve --qemu-uid-range); nil: qemu.conf's user.
	QEMUUsers *sandbox.IDRange
	// Node is this host's name in a cluster (serve --node), carried by
	// every sandbox the daemon answers; "" on a single host.
	Node string
	// CapacityMemoryMiB is the guest memory, in MiB, the daemon may commit
	// in total; 0: the host's memory minus 1 GiB (at least half of it).
	CapacityMemoryMiB int
	// CapacityVCPUs is the vCPUs the daemon may commit in total; 0: 4 per
	// host CPU.
	CapacityVCPUs int
	// TCGCacheMiB is each TCG domain's translation cache in MiB; 0:
	// resources.DefaultTCGCacheMiB (serve's --tcg-cache default too).
	TCGCacheMiB int
	// Defaults are the limits (TTL and idle timeout in seconds, exec
	// timeout in milliseconds, most commands) of sandboxes whose create
	// leaves them zero; zero: none.
	Defaults api.Limits
	// StopOnExit stops every sandbox on Shutdown; by default they keep
	// running for the next daemon to adopt.
	StopOnExit bool
	// WarmPool is the number of sandboxes per warm template kept
	// restored and paused; 0: none.
	WarmPool int
	// WarmTemplates caps the warm templates kept; 0: 8 (serve's default).
	WarmTemplates int
	// WarmMode is how warm templates are made; "": warm.ModeMemory.
	WarmMode warm.Mode
	// AuditMaxBytes rotates the audit log at this many bytes; 0: 64 MiB.
	AuditMaxBytes int64
	// AuditMaxFiles is the number of rotated audit files kept; 0: 10.
	AuditMaxFiles int
	// AuditFullTty keeps every key typed into a terminal session (up to
	// 1 MiB) in its audit entry, not just the first KiB.
	AuditFullTty bool
	// Ceilings cap what a create may ask for (422 above them); zero
	// fields: no ceiling.
	Ceilings daemon.Ceilings
	// Thresholds are the usage warn and act levels in percent of a
	// sandbox's limit; negative: off; zero warns (acts) at once, so give
	// serve's defaults, 80 and 95, or -1.
	Thresholds daemon.Thresholds
	// UsageInterval is how often running sandboxes' usage is sampled; 0:
	// daemon.DefaultUsageInterval (5 s).
	UsageInterval time.Duration
	// Cluster, when set, joins the cluster (serve --cluster; Local and
	// Logger are filled in here); nil: a single host.
	Cluster *ClusterOptions
	// MCP, when set, serves MCP at /mcp of the API's listeners; nil: no
	// MCP.
	MCP *MCPOptions
	// E2B, when set, serves the E2B API on a TCP listener of its own;
	// nil: none.
	E2B *E2BOptions
	// ShutdownTimeout is how long Shutdown lets requests in flight finish
	// before it cuts them. For serve it is taken as given (serve's
	// --shutdown-timeout, default 30 s; 0 cuts at once); for a local host
	// 0 means DefaultLocalShutdownTimeout.
	ShutdownTimeout time.Duration
	// OnReady, when set, is called once everything is assembled, just
	// before the listeners are served (serve prints its "listening on"
	// line there). A local host does not call it.
	OnReady func(h *Host)
}

// LocalOptions are what only a local host (run --local, mcp --local) is
// started with (Options.Local).
type LocalOptions struct {
	// RunID names the run's state directories (16 hex digits by
	// convention; the CLI labels its sandbox agentbox.run-id=RunID).
	RunID string
	// Keep starts domains without autodestroy, so they can outlive the
	// process (see Host.Keep).
	Keep bool
	// OnAccel, when set, is told each accelerator chosen for a create's
	// mode (accel.Choose with the host's probe), e.g. to say which one
	// "auto" chose.
	OnAccel func(mode accel.Mode, choice accel.Choice)
	// GuestAgentChannel adds the QEMU guest agent's channel to domains
	// (daemon.Config.GuestAgentChannel).
	GuestAgentChannel bool
	// Network makes the network provider on the first sandbox whose
	// policy needs one; nil means NewNetwork with Options.Logger.
	Network func() (sandbox.NetworkProvider, error)
}

// NetworkOptions are serve's sandbox network (vmctl/network.Config).
type NetworkOptions struct {
	// Pool is the IPv4 prefix the sandboxes' /30 subnets come from; the
	// zero prefix: network.DefaultPool.
	Pool netip.Prefix
	// Table is the nftables table (family inet) of this daemon's rules;
	// "": network.DefaultTable.
	Table string
	// Hosts resolves names (lower case, without a trailing dot) for
	// allowlisted names before the host's resolver; nil: none.
	Hosts map[string][]netip.Addr
	// SecretsRoots is the pool the intercepting egress proxy verifies the
	// upstream servers of secrets' hosts with; nil: the host's roots.
	SecretsRoots *x509.CertPool
	// TenantPrivate lets tenants' sandboxes reach private (RFC 1918),
	// CGNAT and ULA destinations (daemon.Config.TenantPrivateNetworks;
	// serve --tenant-private-networks); false blocks them.
	TenantPrivate bool
}

// PolicyOptions are serve's policy plugin (vmctl/policy).
type PolicyOptions struct {
	// Command is the plugin's command line, split as a shell would
	// without expansions (policy.ParseCommand); "": no plugin.
	Command string
	// Timeout is the plugin's deadline per decision; must be positive
	// with a Command (serve's default policy.DefaultTimeout).
	Timeout time.Duration
}

// ClusterOptions are serve's cluster membership (vmctl/cluster) and the
// routing between its nodes (vmctl/clusterproxy).
type ClusterOptions struct {
	// Config is the node's configuration without Local, Logger and the
	// tenant hooks, which Start fills in (serveClusterConfig's).
	Config *cluster.Config
	// TLS is the client TLS config for the other nodes' https://
	// addresses (RootCAs from --cluster-ca, the node's certificate with
	// --tls-client-ca); nil: the system's roots.
	TLS *tls.Config
	// TrustedNetwork says the network between the nodes is trusted
	// (serve --cluster-trusted-network): only then may a node advertise
	// an http:// URL, over which the cluster token and the creates'
	// secrets cross in clear. Without it Start refuses an http://
	// Config.Advertise.
	TrustedNetwork bool
}

// MCPOptions are serve's MCP front (serve --mcp).
type MCPOptions struct {
	// Config is the MCP server's configuration without Client, which
	// Start fills in (the API's own handler, in memory).
	Config mcp.Config
	// SessionTimeout ends a session idle this long; 0: never.
	SessionTimeout time.Duration
}

// E2BOptions are serve's E2B front (serve --e2b-listen).
type E2BOptions struct {
	// Listen is the TCP host:port the E2B API is served on. Required.
	Listen string
	// Warm starts every E2B sandbox warm.
	Warm bool
}

// Auth holds the secrets the fronts check: the API's bearer token and
// TLS, the tenants, the cluster peers' token. Start makes of them the
// daemon's one keyring (vmctl/auth: auth.New of Token as the admin's,
// Tenants, and ClusterToken as the peers' on a node of a cluster) and
// hands it to the API server (apiserver.Config.Keyring, which the
// cluster router's Peer is told by), the E2B front (e2b.Config.Keyring)
// and, through the API, /mcp; all of it is wired in one place, auth.go.
type Auth struct {
	// Token is the admin's bearer token (serve --token-file; white space
	// around it ignored); "": none (the unix socket needs none).
	Token string
	// TLS, when set, makes TCP listeners serve HTTPS with it.
	TLS *tls.Config
	// Tenants are the tenants whose tokens are accepted besides Token;
	// nil: none.
	Tenants *tenant.Registry
	// ClusterToken is the token the cluster's nodes send each other
	// (serve --cluster-token-file's content; white space around it
	// ignored); needed with Cluster. The keyring holds it as the peers'
	// secret (auth.Peer) only with Cluster: without one it is ignored.
	ClusterToken string
	// ClusterTokenFile names the file ClusterToken came from, for errors.
	ClusterTokenFile string
}
