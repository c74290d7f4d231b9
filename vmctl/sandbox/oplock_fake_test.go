package sandbox_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/vmctl/sandbox"
	"github.com/agentbox/agentbox/vmctl/sandbox/snapshot"
)

// copyHoldDriver is the fake driver whose first PauseDomain of domain
// after arm (a restore pausing its running source for the copy) pauses
// it, says so on inCopy and returns only when proceed is closed: the copy
// lasts as long as the test wants.
type copyHoldDriver struct {
	*fakeDriver
	mu      sync.Mutex
	domain  string
	inCopy  chan struct{}
	proceed chan struct{}
}

func (d *copyHoldDriver) arm(domain string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.domain, d.inCopy, d.proceed = domain, make(chan struct{}), make(chan struct{})
}

func (d *copyHoldDriver) PauseDomain(ctx context.Context, name string) error {
	d.mu.Lock()
	hold := name == d.domain
	inCopy, proceed := d.inCopy, d.proceed
	if hold {
		d.domain = ""
	}
	d.mu.Unlock()
	err := d.fakeDriver.PauseDomain(ctx, name)
	if hold {
		close(inCopy)
		<-proceed
	}
	return err
}

// TestRestoreCopyHoldsSourceLockFake: a pause of the source sandbox asked
// while a restore copies its overlay (the source's vCPUs stopped for the
// copy) waits for the copy and its resume. Run during it, a pause in
// memory was undone by the copy's resume (the sandbox recorded paused,
// its vCPUs running), and a pause to disk destroyed the domain the
// copy's resume needed (the restore failed).
func TestRestoreCopyHoldsSourceLockFake(t *testing.T) {
	for _, toDisk := range []bool{false, true} {
		name := "in memory"
		if toDisk {
			name = "to disk"
		}
		t.Run(name, func(t *testing.T) {
			fd := newFakeDriver(t)
			drv := &copyHoldDriver{fakeDriver: fd}
			f := newFakeFixture(t, drv, fd)
			src := f.create(t, "src")
			defer f.mgr.Destroy(t0, src)
			if _, err := f.snaps.Save(t0, src, "s", nil); err != nil {
				t.Fatal(err)
			}

			drv.arm(src.Domain)
			type result struct {
				sb  *sandbox.Sandbox
				err error
			}
			restored := make(chan result, 1)
			go func() {
				sb, err := f.snaps.Restore(t0, "s", snapshot.RestoreOptions{Image: f.img, Name: "fork"})
				restored <- result{sb, err}
			}()
			<-drv.inCopy
			paused := make(chan error, 1)
			go func() { paused <- f.mgr.Pause(t0, src, toDisk, "test") }()
			var pauseErr error
			duringCopy := false
			select {
			case pauseErr = <-paused:
				duringCopy = true
			case <-time.After(time.Second): // it waits for the copy, as it must
			}
			close(drv.proceed)
			res := <-restored
			if !duringCopy {
				pauseErr = <-paused
			}
			if res.err != nil {
				t.Fatalf("restore with a pause of its source asked during the copy: %v", res.err)
			}
			defer f.mgr.Destroy(t0, res.sb)
			if duringCopy {
				t.Errorf("the pause of the source ran while the restore copied its overlay (err %v); it must wait for the copy", pauseErr)
			}
			if pauseErr != nil {
				t.Fatalf("pause: %v", pauseErr)
			}
			if st := src.State(); st != sandbox.StatePaused || src.Record().PausedToDisk() != toDisk {
				t.Fatalf("source is %s (to disk %v) after the pause, want paused (to disk %v)", st, src.Record().PausedToDisk(), toDisk)
			}
			d, _ := fd.dom(src.Domain)
			switch {
			case toDisk && d != nil:
				t.Error("source paused to disk still has its domain")
			case !toDisk && (d == nil || !d.paused):
				t.Error("source recorded paused in memory, but its vCPUs run")
			}
			if st := res.sb.State(); st != sandbox.StateRunning {
				t.Errorf("restored sandbox is %s, want running", st)
			}
		})
	}
}
