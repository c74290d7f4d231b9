package network

import (
	"context"
	"errors"
	"fmt"
	"slices"
)

// Release ends the manager's use of its table when the daemon exits: it
// stops every egress service (as Close does) and then deletes the nftables
// table if no tap of the table is left, that is when no sandbox of this
// daemon still has a network (all were stopped, e.g. with
// `serve --stop-on-exit`, or none had one). Otherwise the table stays:
// the sandboxes left running for the next daemon need its rules, and its
// catch-all rules keep any tap no sandbox rule covers closed. kept names
// the taps that kept it (sorted; empty when the table was deleted or never
// made). Call it once, after the last Adopt and Teardown; a Setup racing
// with it fails and leaves nothing, and later Setups fail. Errors:
// netlink or nftables failures (the table then stays).
func (m *Manager) Release(ctx context.Context) (kept []string, err error) {
	// Released before the taps are listed: a Setup that made its tap
	// after the listing sees it and removes its tap (see Setup).
	m.mu.Lock()
	m.released = true
	m.mu.Unlock()
	closeErr := m.Close()
	taps, err := listTaps(tapAlias(m.cfg.Table))
	if err != nil {
		return nil, errors.Join(closeErr, err)
	}
	if len(taps) > 0 {
		slices.Sort(taps)
		m.log.Info("keeping the network table: sandboxes left running need its rules (the next daemon adopts them; `agentbox serve --network-cleanup` removes the table and taps if no daemon will)",
			"table", m.cfg.Table, "taps", taps)
		return taps, closeErr
	}
	// Chains of sandboxes whose tap is gone carry no traffic: they go
	// with the table.
	if err := m.fw.destroy(); err != nil {
		return nil, errors.Join(closeErr, err)
	}
	m.log.Debug("network table removed: no sandbox has a network", "table", m.cfg.Table)
	return nil, closeErr
}

// Cleanup removes what the daemon of table left on the host, for when that
// daemon will not run again: every tap of the table (a sandbox domain
// still running loses its network: QEMU keeps a detached device that
// reaches nothing) and then the nftables table (family inet) with all its
// rules. It needs no daemon and no nft binary (netlink only; CAP_NET_ADMIN).
// Run it only while no daemon uses table: it would cut that daemon's
// sandboxes off. removed lists "tap NAME" and "table inet NAME" for what
// was there. Errors: a bad table name, netlink or nftables failures (what
// could be removed is).
func Cleanup(ctx context.Context, table string) (removed []string, err error) {
	if table == "" {
		table = DefaultTable
	}
	if !tableRE.MatchString(table) {
		return nil, fmt.Errorf("network table %q: want a letter then letters, digits or _, at most 31 bytes", table)
	}
	taps, err := listTaps(tapAlias(table))
	if err != nil {
		return nil, err
	}
	slices.Sort(taps)
	var errs []error
	for _, t := range taps {
		if err := deleteTap(t); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, "tap "+t)
	}
	if len(errs) > 0 {
		// A tap left without the table's catch-all rules would be open
		// to the host: keep the table until every tap is gone.
		return removed, fmt.Errorf("network table inet %s kept because a tap could not be removed: %w", table, errors.Join(errs...))
	}
	fw, err := openFirewall(table)
	if err != nil {
		return removed, err
	}
	fw.mu.Lock()
	exists, err := fw.tableExists()
	fw.mu.Unlock()
	if err != nil {
		return removed, err
	}
	if exists {
		if err := fw.destroy(); err != nil {
			return removed, err
		}
		removed = append(removed, "table inet "+table)
	}
	return removed, nil
}
