package qmp

import "context"

// MigrationCapability is one entry of migrate-set-capabilities (QAPI
// MigrationCapabilityStatus).
type MigrationCapability struct {
	// Capability is the capability's name, e.g. "x-ignore-shared".
	Capability string `json:"capability"`
	// State turns it on or off.
	State bool `json:"state"`
}

// MigrateSetCapabilities sends migrate-set-capabilities. Both ends of a
// migration need the same capabilities (x-ignore-shared above all: the
// source leaves shared RAM out of the stream, the destination expects it
// to be left out).
func (m *Monitor) MigrateSetCapabilities(ctx context.Context, caps ...MigrationCapability) error {
	return m.Execute(ctx, "migrate-set-capabilities", map[string]any{"capabilities": caps}, nil)
}

// Migrate sends migrate with uri (e.g. "unix:/path": QEMU connects to
// it). It returns once the migration started; QueryMigrate follows it.
func (m *Monitor) Migrate(ctx context.Context, uri string) error {
	return m.Execute(ctx, "migrate", map[string]any{"uri": uri}, nil)
}

// MigrateIncoming sends migrate-incoming with uri (e.g. "unix:/path":
// QEMU listens there) to a QEMU started with "-incoming defer". QEMU
// listens when it returns; QueryMigrate follows the load.
func (m *Monitor) MigrateIncoming(ctx context.Context, uri string) error {
	return m.Execute(ctx, "migrate-incoming", map[string]any{"uri": uri}, nil)
}

// MigrationInfo is the reply of query-migrate (QAPI MigrationInfo),
// reduced to its status.
type MigrationInfo struct {
	// Status is QAPI MigrationStatus: "none", "setup", "active",
	// "device", "completed", "failed", "cancelled", …; empty before any
	// migration.
	Status string `json:"status"`
	// ErrorDesc is QEMU's reason when Status is "failed".
	ErrorDesc string `json:"error-desc"`
}

// QueryMigrate sends query-migrate.
func (m *Monitor) QueryMigrate(ctx context.Context) (MigrationInfo, error) {
	var mi MigrationInfo
	err := m.Execute(ctx, "query-migrate", nil, &mi)
	return mi, err
}
