package worker

// RankOf implements api.RankFinder: the rank a live request of this worker was dispatched to.
func (w *Worker) RankOf(rid string) (int, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	e, ok := w.reqs[rid]
	if !ok {
		return -1, false
	}
	return e.rank, true
}
