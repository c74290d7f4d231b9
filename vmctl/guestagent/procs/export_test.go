package procs

// WaitWaiters waits until every goroutine that waits for a command's end
// has returned, so tests can count OnExit calls exactly.
func (t *Table) WaitWaiters() { t.waiters.Wait() }
