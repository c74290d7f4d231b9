package e2b

// The E2B API's JSON shapes, as the SDK's generated OpenAPI types
// (components["schemas"]) name them. Only the fields agentbox reads or
// answers are declared; unknown request fields are ignored, as E2B adds
// fields over time.

// apiError is E2B's error body (schema Error): Code is the HTTP status;
// ErrorCode carries agentbox's stable code (api.Code*).
type apiError struct {
	Code      int    `json:"code"`
	ErrorCode string `json:"error_code,omitempty"`
	Message   string `json:"message"`
}

// newSandbox is the body of POST /v2/sandboxes (schema NewSandboxV2).
type newSandbox struct {
	TemplateID          string            `json:"templateID"`
	Timeout             *int64            `json:"timeout"`
	Metadata            map[string]string `json:"metadata"`
	EnvVars             map[string]string `json:"envVars"`
	AllowInternetAccess *bool             `json:"allow_internet_access"`
	Network             *networkConfig    `json:"network"`
	AutoPause           *bool             `json:"autoPause"`
	AutoPauseMemory     *bool             `json:"autoPauseMemory"`
	AutoResume          *struct {
		Enabled bool `json:"enabled"`
	} `json:"autoResume"`
	// Secure is the deprecated v1 flag: every sandbox gets an access
	// token, so it is ignored.
	Secure *bool          `json:"secure"`
	MCP    map[string]any `json:"mcp"`
	IAM    *struct {
		Tokens map[string]any `json:"tokens"`
	} `json:"iam"`
	VolumeMounts []map[string]any `json:"volumeMounts"`
}

// networkConfig is schema SandboxNetworkConfig.
type networkConfig struct {
	AllowOut           []string         `json:"allowOut"`
	DenyOut            []string         `json:"denyOut"`
	Rules              map[string][]any `json:"rules"`
	EgressProxy        map[string]any   `json:"egressProxy"`
	AllowPublicTraffic *bool            `json:"allowPublicTraffic,omitempty"`
	MaskRequestHost    string           `json:"maskRequestHost,omitempty"`
	HTTPSPorts         []int            `json:"httpsPorts,omitempty"`
}

// networkInfo is the network of a SandboxDetail.
type networkInfo struct {
	AllowOut []string `json:"allowOut,omitempty"`
	DenyOut  []string `json:"denyOut,omitempty"`
}

// sandboxAnswer is the answer of create and connect (schema Sandbox).
type sandboxAnswer struct {
	SandboxID       string `json:"sandboxID"`
	TemplateID      string `json:"templateID"`
	ClientID        string `json:"clientID"`
	EnvdVersion     string `json:"envdVersion"`
	EnvdAccessToken string `json:"envdAccessToken,omitempty"`
}

// lifecycle is schema SandboxLifecycle.
type lifecycle struct {
	OnTimeout  string `json:"onTimeout"`
	AutoResume bool   `json:"autoResume"`
}

// listedSandbox is one element of GET /v2/sandboxes (schema
// ListedSandbox).
type listedSandbox struct {
	SandboxID   string            `json:"sandboxID"`
	TemplateID  string            `json:"templateID"`
	ClientID    string            `json:"clientID"`
	StartedAt   string            `json:"startedAt"`
	EndAt       string            `json:"endAt"`
	CPUCount    int               `json:"cpuCount"`
	MemoryMB    int               `json:"memoryMB"`
	DiskSizeMB  int64             `json:"diskSizeMB"`
	State       string            `json:"state"`
	EnvdVersion string            `json:"envdVersion"`
	Metadata    map[string]string `json:"metadata"`
}

// sandboxDetail is GET /sandboxes/{id} (schema SandboxDetail).
type sandboxDetail struct {
	listedSandbox
	EnvdAccessToken     string       `json:"envdAccessToken,omitempty"`
	AllowInternetAccess *bool        `json:"allowInternetAccess,omitempty"`
	Network             *networkInfo `json:"network,omitempty"`
	Lifecycle           lifecycle    `json:"lifecycle"`
}

// connectRequest is the body of POST /v2/sandboxes/{id}/connect (schema
// ConnectSandboxV2).
type connectRequest struct {
	Timeout *int64 `json:"timeout"`
	Memory  *bool  `json:"memory"`
}

// timeoutRequest is the body of POST /sandboxes/{id}/timeout (schema
// SandboxTimeoutRequest).
type timeoutRequest struct {
	Timeout *int64 `json:"timeout"`
}

// pauseRequest is the body of POST /sandboxes/{id}/pause (schema
// SandboxPauseRequest).
type pauseRequest struct {
	Memory *bool `json:"memory"`
}

// sandboxMetric is one element of GET /sandboxes/{id}/metrics (schema
// SandboxMetric).
type sandboxMetric struct {
	Timestamp     string  `json:"timestamp"`
	TimestampUnix int64   `json:"timestampUnix"`
	CPUCount      int     `json:"cpuCount"`
	CPUUsedPct    float64 `json:"cpuUsedPct"`
	MemUsed       uint64  `json:"memUsed"`
	MemTotal      uint64  `json:"memTotal"`
	MemCache      uint64  `json:"memCache"`
	DiskUsed      uint64  `json:"diskUsed"`
	DiskTotal     uint64  `json:"diskTotal"`
}
