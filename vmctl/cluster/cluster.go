package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/errdefs"
)

// Local is the node's own daemon (vmctl/daemon.Daemon) as the cluster
// uses it: the ONE create path (CreateLocal), its admission asked before
// a pull (Room), its capacity and sandboxes for the heartbeat and the
// directory, its events to keep the directory current, and the removal of
// a sandbox nobody waits for any more.
type Local interface {
	CreateLocal(ctx context.Context, req api.CreateSandboxRequest) (api.Sandbox, error)
	Room(ctx context.Context, req api.CreateSandboxRequest) error
	Info(ctx context.Context) (api.Info, error)
	ListSandboxes(ctx context.Context, labels map[string]string, state string) ([]api.Sandbox, error)
	DeleteSandbox(ctx context.Context, ref string, force bool) error
	Events(ctx context.Context, emit func(api.Event) error) error
}

// Config configures a node (Join).
type Config struct {
	// Servers are the NATS server URLs (serve --cluster), e.g.
	// "nats://n1:4222". Required.
	Servers []string
	// Token authenticates to NATS (serve --nats-token-file; the server's
	// authorization { token }); "" for none. NATS must authenticate the
	// node somehow: Token, CredsFile, NKeyFile, a client certificate in
	// TLS, or user:password@ (or token@) in a Servers URL; Join refuses
	// a Config with none of them (CheckNATSAuth).
	Token string
	// CredsFile is a NATS credentials file (a user JWT and its nkey seed;
	// serve --nats-creds); "" for none.
	CredsFile string
	// NKeyFile is a file holding a user nkey seed (serve --nats-nkey);
	// "" for none.
	NKeyFile string
	// TLS, if set, is the TLS config of the connection to NATS (RootCAs
	// from serve --nats-ca; a client certificate from --nats-cert and
	// --nats-key, which authenticates the node to a server with
	// verify: true).
	TLS *tls.Config
	// Node is this node's name, unique in the cluster (serve --node): the
	// NamePattern syntax. Required.
	Node string
	// Advertise is the URL other nodes and clients reach this node's API
	// at (serve --advertise). Required.
	Advertise string
	// Version is this node's agentbox version, advertised.
	Version string
	// Local is this node's daemon. Required.
	Local Local
	// Logger receives structured logs; nil discards them.
	Logger *slog.Logger
	// QueueTimeout is how long a create waits in the queue for a node
	// with room before 429 queue_timeout (serve --queue-timeout); 0 means
	// DefaultQueueTimeout.
	QueueTimeout time.Duration
	// Heartbeat is how often the node writes its membership entry; 0
	// means 2 s. Expiry is how old a heartbeat may be before readers call
	// the node unreachable; 0 means 10 s.
	Heartbeat, Expiry time.Duration
	// NodeMaxAge is the membership bucket's TTL: an entry not written for
	// this long (a node gone for good) is removed; 0 means 24 h.
	NodeMaxAge time.Duration
	// BreakerFailures is how many creates in a row must fail (5xx) before
	// the node stops pulling; 0 means 3. BreakerCooldown is the first
	// pause, doubled each time the breaker opens again; 0 means 30 s.
	BreakerFailures int
	BreakerCooldown time.Duration
	// Concurrency is how many pulled creates the node runs at once; 0
	// means 4.
	Concurrency int
	// Replicas is the JetStream replication of the buckets and streams;
	// 0 means min(3, the servers the connection knows).
	Replicas int
	// Priority returns a create's priority class (PriorityHigh,
	// PriorityNormal, PriorityLow; "" is normal); nil means every create
	// is normal. The tenant front sets it from the request and the
	// tenant's ceiling.
	Priority func(ctx context.Context, req api.CreateSandboxRequest) string
	// Tenant names the caller's tenant for the queue message and the
	// directory entry ("" for none); WithTenant restores it on the node
	// that creates. Both nil without tenants.
	Tenant     func(ctx context.Context) string
	WithTenant func(ctx context.Context, tenant string) (context.Context, error)
	// FetchSecrets fetches a create's secrets from the node it came in
	// at, over the cluster's authenticated API (clusterproxy's
	// SecretsClient; secrets.go): what a node that takes a create with
	// secrets queued at another node calls. nil: such a create fails
	// with ErrSecretsUnavailable (one queued here is read here).
	FetchSecrets SecretsFetcher
	// Quotas, if set, is the cluster-wide tenant quota store the daemon
	// reserves with (NewQuotaStore; serve sets it with --tenants): the
	// node makes its bucket and keeps the node's share written (Sync with
	// every reconciliation).
	Quotas *QuotaStore
}

// DefaultQueueTimeout is how long a create waits in the queue by default.
const DefaultQueueTimeout = 60 * time.Second

// Priority classes of the create queue, served high before normal before
// low: the API's (CreateSandboxRequest.Priority).
const (
	PriorityHigh   = api.PriorityHigh
	PriorityNormal = api.PriorityNormal
	PriorityLow    = api.PriorityLow
)

// Errors of the cluster, with the API codes they are answered with.
var (
	// ErrQueueTimeout: no node with room took the create within the
	// queue timeout (429 queue_timeout).
	ErrQueueTimeout = errdefs.New(errdefs.ErrResourceExhausted, api.CodeQueueTimeout, "create queue timeout")
	// ErrUnavailable: NATS is unreachable (503 cluster_unavailable).
	ErrUnavailable = errdefs.New(errdefs.ErrUnavailable, api.CodeClusterUnavailable, "NATS is unreachable: cluster creates resume when it is back")
	// ErrNameTaken: another sandbox of the cluster has the name (409
	// name_taken).
	ErrNameTaken = errdefs.New(errdefs.ErrAlreadyExists, api.CodeNameTaken, "sandbox name taken")
	// ErrNodeNotFound: no node of that name is in the membership bucket
	// (404 not_found).
	ErrNodeNotFound = errdefs.New(errdefs.ErrNotFound, "", "node not found")
	// ErrSandboxNotFound: the directory has no sandbox of that ID or name
	// (404 not_found).
	ErrSandboxNotFound = errdefs.New(errdefs.ErrNotFound, "", "sandbox not found")
)

// Names of what the cluster keeps in JetStream.
const (
	bucketNodes     = "agentbox_nodes"
	bucketSandboxes = "agentbox_sandboxes"
	bucketNames     = "agentbox_names"
	subjectWake     = "agentbox.create.wake" // core NATS: a create was queued, pull now
	consumerName    = "agentbox_placer"
)

// class is one priority class's stream.
type class struct {
	name    string // PriorityHigh, …
	stream  string // AGENTBOX_CREATE_HIGH, …
	subject string // agentbox.create.high, …
}

// classes in the order the puller serves them.
var classes = [...]class{
	{PriorityHigh, "AGENTBOX_CREATE_HIGH", "agentbox.create.high"},
	{PriorityNormal, "AGENTBOX_CREATE_NORMAL", "agentbox.create.normal"},
	{PriorityLow, "AGENTBOX_CREATE_LOW", "agentbox.create.low"},
}

// Node is this daemon as a node of the cluster. Join makes it; it
// implements Directory, Nodes and daemon.Cluster. Close leaves.
type Node struct {
	cfg Config
	log *slog.Logger
	nc  *nats.Conn

	mu    sync.Mutex
	js    jetstream.JetStream           // set once setup succeeded
	nodes jetstream.KeyValue            // agentbox_nodes
	sbs   jetstream.KeyValue            // agentbox_sandboxes
	names jetstream.KeyValue            // agentbox_names
	cons  map[string]jetstream.Consumer // by class name
	strs  map[string]jetstream.Stream   // by class name
	// setupErr is the last failed setup while js is nil (nil: none yet).
	setupErr error

	secrets  secretStore // of the creates queued here (secrets.go)
	draining atomic.Bool
	brk      *breaker
	wake     chan struct{} // pull now
	beat     chan struct{} // heartbeat now
	sync     chan struct{} // reconcile the directory now
	slots    chan struct{} // Concurrency

	ctx    context.Context // the node's life
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// Join connects to NATS and starts the node: membership heartbeats, the
// directory kept in step with the daemon's sandboxes, and the puller of
// the create queue. NATS need not be up: the node keeps trying (its
// cluster-wide calls answer 503 cluster_unavailable meanwhile) and
// catches up when it is. Errors: a bad Config.
func Join(ctx context.Context, cfg Config) (*Node, error) {
	if len(cfg.Servers) == 0 || cfg.Node == "" || cfg.Advertise == "" || cfg.Local == nil {
		return nil, errdefs.ErrInvalidArgument.WithMessage("cluster: give the NATS servers (--cluster), this node's name (--node) and the URL other nodes reach it at (--advertise)")
	}
	if !api.ValidName(cfg.Node) {
		return nil, errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("cluster: node name %q: use letters, digits, '_', '.', '-' (at most 63), starting with a letter or digit", cfg.Node))
	}
	if err := CheckNATSAuth(cfg); err != nil {
		return nil, err
	}
	if cfg.QueueTimeout <= 0 {
		cfg.QueueTimeout = DefaultQueueTimeout
	}
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = 2 * time.Second
	}
	if cfg.Expiry <= 0 {
		cfg.Expiry = 10 * time.Second
	}
	if cfg.NodeMaxAge <= 0 {
		cfg.NodeMaxAge = 24 * time.Hour
	}
	if cfg.BreakerFailures <= 0 {
		cfg.BreakerFailures = 3
	}
	if cfg.BreakerCooldown <= 0 {
		cfg.BreakerCooldown = 30 * time.Second
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 4
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	n := &Node{
		cfg: cfg, log: log.With("node", cfg.Node),
		brk:  newBreaker(cfg.BreakerFailures, cfg.BreakerCooldown),
		wake: make(chan struct{}, 1), beat: make(chan struct{}, 1), sync: make(chan struct{}, 1),
		slots: make(chan struct{}, cfg.Concurrency),
	}
	n.ctx, n.cancel = context.WithCancel(context.WithoutCancel(ctx))
	opts := []nats.Option{
		nats.Name("agentbox " + cfg.Node),
		nats.RetryOnFailedConnect(true),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(500 * time.Millisecond),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			n.log.Warn("NATS disconnected: cluster creates refused until it is back", "err", err)
		}),
		nats.ReconnectHandler(func(c *nats.Conn) {
			n.log.Info("NATS reconnected", "server", c.ConnectedUrlRedacted())
			signal(n.sync)
			signal(n.beat)
			signal(n.wake)
		}),
		nats.ConnectHandler(func(*nats.Conn) { signal(n.sync) }),
	}
	if cfg.Token != "" {
		opts = append(opts, nats.Token(cfg.Token))
	}
	if cfg.CredsFile != "" {
		opts = append(opts, nats.UserCredentials(cfg.CredsFile))
	}
	if cfg.NKeyFile != "" {
		o, err := nats.NkeyOptionFromSeed(cfg.NKeyFile)
		if err != nil {
			n.cancel()
			return nil, errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("cluster: NATS nkey seed %s: %v", cfg.NKeyFile, err))
		}
		opts = append(opts, o)
	}
	if cfg.TLS != nil {
		opts = append(opts, nats.Secure(cfg.TLS.Clone()))
	}
	nc, err := nats.Connect(strings.Join(cfg.Servers, ","), opts...)
	if err != nil {
		n.cancel()
		return nil, errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("cluster: %v", err))
	}
	n.nc = nc
	n.wg.Add(1)
	go n.run()
	return n, nil
}

// CheckNATSAuth refuses a Config whose NATS connection authenticates
// nothing (Join calls it; serve too, before it starts anything): whoever reaches an open NATS could read the cluster's state
// and queue, drain or rewrite anything in it. Errors:
// errdefs.ErrInvalidArgument saying what to add.
func CheckNATSAuth(cfg Config) error {
	if cfg.Token != "" || cfg.CredsFile != "" || cfg.NKeyFile != "" || (cfg.TLS != nil && (len(cfg.TLS.Certificates) > 0 || cfg.TLS.GetClientCertificate != nil)) {
		return nil
	}
	for _, s := range cfg.Servers {
		if u, err := url.Parse(s); err == nil && u.User != nil && u.User.String() != "" {
			return nil
		}
	}
	return errdefs.ErrInvalidArgument.WithMessage("cluster: NATS needs authentication, or anyone who reaches it could queue, drain and rewrite the cluster: require it in the nats-server's config (authorization { token } or users, nkeys, TLS verify) and give the node its credentials: --nats-token-file, --nats-creds, --nats-nkey, --nats-cert and --nats-key, or user:password@ in the --cluster URL")
}

// signal wakes whoever waits on ch without blocking.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// run sets the JetStream side up (retrying until NATS answers), then runs
// the node's loops until Close.
func (n *Node) run() {
	defer n.wg.Done()
	for {
		err := n.setup(n.ctx)
		if err == nil {
			break
		}
		if n.ctx.Err() != nil {
			return
		}
		n.mu.Lock()
		n.setupErr = err
		n.mu.Unlock()
		n.log.Debug("cluster setup: retrying", "err", err)
		select {
		case <-n.ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
	n.log.Info("joined the cluster", "advertise", n.cfg.Advertise)
	sub, err := n.nc.Subscribe(subjectWake, func(*nats.Msg) { signal(n.wake) })
	if err == nil {
		defer sub.Unsubscribe() //nolint:errcheck // the connection closes next
	}
	n.wg.Add(4)
	go func() { defer n.wg.Done(); n.heartbeat(n.ctx) }()   // membership.go
	go func() { defer n.wg.Done(); n.watchSelf(n.ctx) }()   // membership.go
	go func() { defer n.wg.Done(); n.followLocal(n.ctx) }() // index.go
	go func() { defer n.wg.Done(); n.pull(n.ctx) }()        // queue.go
	<-n.ctx.Done()
}

// setup makes (or finds) the buckets, the streams and their consumer.
func (n *Node) setup(ctx context.Context) error {
	if !n.nc.IsConnected() {
		return ErrUnavailable
	}
	js, err := jetstream.New(n.nc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	replicas := n.cfg.Replicas
	if replicas <= 0 {
		replicas = min(3, max(1, len(n.nc.Servers())))
	}
	nodes, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: bucketNodes, Description: "agentbox cluster membership: node name → heartbeat, state, capacity",
		TTL: n.cfg.NodeMaxAge, Replicas: replicas, History: 1,
	})
	if err != nil {
		return fmt.Errorf("bucket %s: %w", bucketNodes, err)
	}
	sbs, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: bucketSandboxes, Description: "agentbox sandbox directory: sandbox id → owning node",
		Replicas: replicas, History: 1,
	})
	if err != nil {
		return fmt.Errorf("bucket %s: %w", bucketSandboxes, err)
	}
	names, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: bucketNames, Description: "agentbox cluster-unique sandbox names: name → sandbox id",
		Replicas: replicas, History: 1,
	})
	if err != nil {
		return fmt.Errorf("bucket %s: %w", bucketNames, err)
	}
	if n.cfg.Quotas != nil {
		quota, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket: bucketQuota, Description: "agentbox tenant usage: tenant → each node's share",
			Replicas: replicas, History: 1,
		})
		if err != nil {
			return fmt.Errorf("bucket %s: %w", bucketQuota, err)
		}
		n.cfg.Quotas.attach(quota)
	}
	strs, cons := map[string]jetstream.Stream{}, map[string]jetstream.Consumer{}
	for _, c := range classes {
		// No direct get: the puller peeks at each class's head (pullOne)
		// and a direct get may be answered by a follower that has not
		// yet stored the last create, which made a waiting high create
		// look absent while a low one was taken (seen in TestPriorities
		// under load); a message get is the leader's.
		s, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
			Name: c.stream, Description: "agentbox creates of priority " + c.name,
			Subjects: []string{c.subject}, Retention: jetstream.WorkQueuePolicy,
			Storage: jetstream.FileStorage, Replicas: replicas, AllowDirect: false,
			MaxAge: 24 * time.Hour, // a message nobody took or removed: its creator gave up long ago
		})
		if err != nil {
			return fmt.Errorf("stream %s: %w", c.stream, err)
		}
		cn, err := s.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
			Durable: consumerName, AckPolicy: jetstream.AckExplicitPolicy,
			AckWait: 30 * time.Second, MaxDeliver: -1, Replicas: replicas,
		})
		if err != nil {
			return fmt.Errorf("stream %s consumer: %w", c.stream, err)
		}
		strs[c.name], cons[c.name] = s, cn
	}
	n.mu.Lock()
	n.js, n.nodes, n.sbs, n.names, n.strs, n.cons = js, nodes, sbs, names, strs, cons
	n.setupErr = nil
	n.mu.Unlock()
	return nil
}

// handles are the JetStream handles once setup succeeded and NATS is
// connected; else ErrUnavailable: NATS unreachable, or (connected, not
// set up yet) the node still joining, with the last setup error, e.g. a
// nats-server started without JetStream (-js).
type handles struct {
	js                jetstream.JetStream
	nodes, sbs, names jetstream.KeyValue
	strs              map[string]jetstream.Stream
	cons              map[string]jetstream.Consumer
}

func (n *Node) handles() (handles, error) {
	n.mu.Lock()
	h := handles{n.js, n.nodes, n.sbs, n.names, n.strs, n.cons}
	setupErr := n.setupErr
	n.mu.Unlock()
	switch {
	case !n.nc.IsConnected():
		return handles{}, ErrUnavailable
	case h.js == nil && setupErr != nil:
		return handles{}, ErrUnavailable.WithMessage(fmt.Sprintf("this node has not joined the cluster yet: NATS answers but setting up its JetStream buckets and streams failed (%v): check that every nats-server runs with JetStream (-js); the node keeps retrying", setupErr))
	case h.js == nil:
		return handles{}, ErrUnavailable.WithMessage("this node is joining the cluster (setting up its JetStream buckets and streams): retry in a moment")
	}
	return h, nil
}

// unavailable turns an error of a NATS call into ErrUnavailable when it
// is one of losing NATS (no connection, no JetStream quorum, a timeout),
// and leaves others alone.
func unavailable(err error) error {
	if err == nil {
		return nil
	}
	switch {
	case errors.Is(err, nats.ErrConnectionClosed), errors.Is(err, nats.ErrConnectionReconnecting),
		errors.Is(err, nats.ErrTimeout), errors.Is(err, nats.ErrNoResponders),
		errors.Is(err, context.DeadlineExceeded), errors.Is(err, jetstream.ErrNoStreamResponse),
		errors.Is(err, jetstream.ErrJetStreamNotEnabled), errors.Is(err, nats.ErrNoServers):
		return fmt.Errorf("%w (%v)", ErrUnavailable, err)
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && apiErr.Code == 503 {
		return fmt.Errorf("%w (%v)", ErrUnavailable, err)
	}
	return err
}

// Self implements Nodes: this node's name.
func (n *Node) Self() string { return n.cfg.Node }

// Connected reports whether NATS is reachable now.
func (n *Node) Connected() bool { return n.nc.IsConnected() }

// Close leaves the cluster: the loops stop (a create being made finishes
// first, until ctx ends), the membership entry stays (readers see it
// turn unreachable), and the NATS connection is drained.
func (n *Node) Close(ctx context.Context) error {
	n.cancel()
	done := make(chan struct{})
	go func() { n.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
	n.nc.Close()
	return nil
}
