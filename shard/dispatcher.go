package shard

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"
)

// DefaultStaleAfter is how long a rank may go without a load report (or
// heartbeat) before Expire declares it down.
const DefaultStaleAfter = 3 * time.Second

// ErrNoRankUp is returned (wrapped) by Pick when every rank is down.
var ErrNoRankUp = errors.New("no data-parallel rank is up")

// Load is one load report from a rank, piggybacked on its output batches or
// sent as a heartbeat. Every field is a snapshot taken at one instant, so
// Received counts exactly the requests already included in Running+Waiting.
type Load struct {
	// Seq increases with every report a rank sends; a report whose Seq is
	// not above the last one accepted is stale (reordered or duplicated)
	// and is ignored.
	Seq uint64 `json:"seq"`
	// Running and Waiting count the rank's requests from all workers.
	Running int `json:"running"`
	Waiting int `json:"waiting"`
	// KVTokensUsed is the number of KV-cache token slots in use;
	// KVTokensCapacity the total (0 if unknown).
	KVTokensUsed     int64 `json:"kv_tokens_used"`
	KVTokensCapacity int64 `json:"kv_tokens_capacity"`
	// KVBlockSize is the positions of one of the rank's KV blocks (0 if unknown).
	KVBlockSize int64 `json:"kv_block_size"`
	// WaitingTokens is the prompt tokens of waiting requests, which hold no
	// KV slots yet; without it MinimumTokens cannot see queued prompts.
	WaitingTokens int64 `json:"waiting_tokens"`
	// Received and ReceivedTokens are cumulative: requests (and their prompt
	// tokens) this rank has received from the worker the report is sent to.
	// They acknowledge entries of that worker's dispatch ledger.
	Received       uint64 `json:"received"`
	ReceivedTokens uint64 `json:"received_tokens"`
	// ReceivedAll and ReceivedTokensAll are the same counters for every
	// worker (index = worker). With a shared Ledger they acknowledge the
	// other workers' dispatches too. Report copies them.
	ReceivedAll []uint64 `json:"-"`
	// WaitingByPriority counts the rank scheduler's waiting requests per priority value (lowest
	// first, a bounded number of values); WaitingOtherPriority those of the values after them.
	WaitingByPriority    []PriorityCount `json:"waiting_by_priority,omitempty"`
	WaitingOtherPriority int64           `json:"waiting_other_priority,omitempty"`
	ReceivedTokensAll    []uint64        `json:"-"`
	// Preemptions and PrefixHitTokens are the rank's cumulative scheduler counters, carried for
	// /metrics; dispatch does not read them.
	Preemptions     uint64 `json:"preemptions"`
	PrefixHitTokens uint64 `json:"prefix_hit_tokens"`
	// Steps, SpecDrafts, SpecDraftTokens and SpecAccepted are the rank's cumulative forward
	// steps and speculative verifications, draft tokens and accepted drafts, for /metrics too.
	Steps           uint64 `json:"steps"`
	SpecDrafts      uint64 `json:"spec_drafts"`
	SpecDraftTokens uint64 `json:"spec_draft_tokens"`
	SpecAccepted    uint64 `json:"spec_accepted"`
}

// Option configures a Dispatcher.
type Option func(*Dispatcher)

// WithStaleAfter sets how long a rank may stay silent before Expire declares
// it down; d <= 0 disables the check.
func WithStaleAfter(d time.Duration) Option { return func(x *Dispatcher) { x.staleAfter = d } }

// WithWatchGap says the caller calls Expire at least every gap while it runs.
// Silence is then measured in the time the caller was watching: a longer time
// between two Expire calls is the caller's own stall (a stopped or starved
// process reads no reports, however alive the ranks are) and counts as gap
// only, so a worker's stall never makes it blame a healthy rank. Without it
// every moment counts.
func WithWatchGap(gap time.Duration) Option { return func(x *Dispatcher) { x.watchGap = gap } }

// WithAwaitFirstReport keeps every rank out of dispatch until its first load
// report: a rank may still be loading its model, and a request sent to it now
// would sit unanswered. Without it ranks count as heard at creation.
func WithAwaitFirstReport() Option { return func(x *Dispatcher) { x.awaitFirst = true } }

// WithWorkers tells the dispatcher how many tokenizer workers (each with
// its own Dispatcher) share the ranks. Without it a dispatcher acts as if
// it were the only worker.
//
// A worker cannot see what the others dispatched after a rank's last report,
// so it assumes they dispatch like itself: its unacknowledged dispatches
// count `workers` times. Without this every worker fills the same
// under-loaded rank up to the level of the others and the rank ends up
// `workers` times over-filled (a herd); with it each worker fills only its
// share of the gap, and a rank whose report is older than the others' is
// charged for the dispatches the other workers probably sent it meanwhile.
func WithWorkers(n int) Option { return func(x *Dispatcher) { x.workers = n } }

// WithLedger makes the dispatcher record its dispatches in, and count
// pending load from, the ledger all workers share (see Ledger). Each rank's
// pending load is then exact for every worker's dispatches, and the
// WithWorkers estimate is not needed.
func WithLedger(l *Ledger) Option { return func(x *Dispatcher) { x.ledger = l } }

// WithClock replaces time.Now (tests drive staleness deterministically).
func WithClock(now func() time.Time) Option { return func(x *Dispatcher) { x.now = now } }

// Dispatcher assigns requests of one tokenizer worker to data-parallel ranks,
// and owns the worker's view of which ranks are alive. Each worker owns its
// own Dispatcher; all methods are safe for concurrent use.
//
// Liveness: a rank is up once it has reported (WithAwaitFirstReport) and stays
// up until Expire finds its last accepted report older than the stale timeout;
// the next report brings it back with a clean slate, since a silent rank has
// most likely restarted.
//
// Effective load of a rank = its last accepted report + what this worker
// dispatched to it that the report does not acknowledge yet (sent minus
// Received, and likewise for prompt tokens), weighted by the number of
// workers (see WithWorkers). The ledger is two cumulative
// counters per rank, so it needs no per-request memory and no Finished call:
// a request leaves the ledger when a report acknowledges its receipt, and its
// completion shows up as lower Running in a later report.
type Dispatcher struct {
	method     Method
	worker     int
	workers    int           // tokenizer workers sharing the ranks; weight of own pending
	staleAfter time.Duration // silence after which Expire declares a rank down; <= 0: never
	awaitFirst bool          // ranks are down until their first report
	watchGap   time.Duration // the longest gap between Expire calls that counts whole; <= 0: any
	now        func() time.Time
	ledger     *Ledger // shared with the other workers; nil: this worker's view only

	mu    sync.Mutex
	ranks []rankState
	next  int // where the next scan starts, so ties rotate
	// meanPrompt is a moving average of prompt lengths seen by Pick.
	meanPrompt float64
	// scratch space for Pick, per rank
	up    []bool
	score []float64
	// prefix is cache_aware's record of what was sent where (nil for other methods); match
	// and keys are Pick's scratch space for it.
	prefix              *prefixIndex
	prefixKeys          int
	match               []int
	keys                []uint64
	boundAbs, boundFrac float64 // see WithCacheAwareBound
	// watched is the time the caller has been watching (see WithWatchGap) from creation to
	// lastExpire, the last Expire call (or creation); silence is measured on this clock.
	watched    time.Duration
	lastExpire time.Time
}

type rankState struct {
	load       Load
	hasReport  bool
	heardAt    time.Time     // last accepted report, comeback or creation
	heardWatch time.Duration // the watched clock (Dispatcher.watched) at heardAt
	sent       uint64        // requests this worker dispatched here, ever
	sentTokens uint64        // their prompt tokens
	silent     string        // why Expire declared the rank down; "" while it is not
}

// NewDispatcher returns the dispatcher of tokenizer worker `worker` over
// numRanks ranks. Ranks count as freshly heard at creation, so a rank that
// never reports is expired after the stale timeout.
func NewDispatcher(numRanks int, method Method, worker int, opts ...Option) (*Dispatcher, error) {
	if numRanks <= 0 {
		return nil, fmt.Errorf("new dispatcher: dp size %d, want >= 1", numRanks)
	}
	if int(method) >= len(methodNames) {
		return nil, fmt.Errorf("new dispatcher: unknown method %d", method)
	}
	if worker < 0 {
		return nil, fmt.Errorf("new dispatcher: worker %d, want >= 0", worker)
	}
	d := &Dispatcher{
		method:     method,
		worker:     worker,
		staleAfter: DefaultStaleAfter,
		now:        time.Now,
		ranks:      make([]rankState, numRanks),
		up:         make([]bool, numRanks),
		score:      make([]float64, numRanks),
		// Workers start their rotation at different ranks so that ties
		// (e.g. everything idle) do not send every worker's first request
		// to rank 0.
		next:       worker % numRanks,
		prefixKeys: defaultPrefixKeys,
		boundAbs:   1,
		boundFrac:  0.15,
	}
	for _, o := range opts {
		o(d)
	}
	switch {
	case d.workers == 0: // WithWorkers not given: behave as the only worker
		d.workers = 1
	case d.workers < 0 || worker >= d.workers:
		return nil, fmt.Errorf("new dispatcher: worker %d of %d workers", worker, d.workers)
	}
	if d.ledger != nil && (d.ledger.workers != d.workers || d.ledger.ranks != numRanks) {
		return nil, fmt.Errorf("new dispatcher: shared ledger is for %d workers x %d ranks, want %d x %d",
			d.ledger.workers, d.ledger.ranks, d.workers, numRanks)
	}
	if method == CacheAware {
		d.prefix = newPrefixIndex(d.prefixKeys, numRanks)
		d.match = make([]int, numRanks)
	}
	now := d.now()
	d.lastExpire = now
	for i := range d.ranks {
		d.ranks[i].heardAt = now
		if d.ledger != nil {
			// A restarted worker goes on from what it sent before: the ranks'
			// acknowledgements of it are cumulative too.
			d.ranks[i].sent, d.ranks[i].sentTokens = d.ledger.Sent(worker, i)
		}
	}
	return d, nil
}

// Pick chooses the rank for a request with promptTokens prompt tokens and
// records the dispatch in the ledger. routed >= 0 forces that rank (it must
// be up); routed == -1 lets the policy choose.
func (d *Dispatcher) Pick(promptTokens int, routed int) (int, error) {
	return d.pick(promptTokens, nil, routed)
}

// PickPrompt is Pick for the prompt ids: cache_aware routes by its prefix (and records where
// it went); the other methods see only its length.
func (d *Dispatcher) PickPrompt(ids []int32, routed int) (int, error) {
	return d.pick(len(ids), ids, routed)
}

func (d *Dispatcher) pick(promptTokens int, ids []int32, routed int) (int, error) {
	if promptTokens < 0 {
		return -1, fmt.Errorf("pick rank: negative prompt length %d", promptTokens)
	}
	if routed < -1 || routed >= len(d.ranks) {
		return -1, fmt.Errorf("pick rank: routed rank %d out of range [0, %d)", routed, len(d.ranks))
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.meanPrompt += (float64(promptTokens) - d.meanPrompt) / 16
	if d.prefix != nil {
		d.keys = d.prefix.keys(d.keys[:0], ids)
	}
	if routed >= 0 {
		if reason, down := d.downLocked(routed); down {
			return -1, fmt.Errorf("pick rank: routed rank %d is down: %s", routed, reason)
		}
		d.recordLocked(routed, promptTokens)
		if d.prefix != nil {
			d.prefix.record(d.keys, routed)
		}
		return routed, nil
	}
	var r int
	switch d.method {
	case RoundRobin:
		r = d.pickRoundRobinLocked()
	case CacheAware:
		r = d.pickCacheAwareLocked(d.keys)
		if r >= 0 {
			d.prefix.record(d.keys, r)
		}
	default:
		r = d.pickLeastLoadedLocked()
	}
	if r < 0 {
		return -1, d.allDownErrLocked()
	}
	d.next = (r + 1) % len(d.ranks)
	d.recordLocked(r, promptTokens)
	return r, nil
}

// Undo takes back a Pick of rank for a request of promptTokens that was never
// sent (the send failed), so the ledger does not wait for an acknowledgement
// that will not come.
func (d *Dispatcher) Undo(rank, promptTokens int) error {
	if err := d.checkRank(rank); err != nil {
		return fmt.Errorf("undo pick: %w", err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	rs := &d.ranks[rank]
	if rs.sent == 0 || rs.sentTokens < uint64(promptTokens) {
		return nil // the rank came back clean since the pick: nothing of it is left to undo
	}
	rs.sent--
	rs.sentTokens -= uint64(promptTokens)
	if d.ledger != nil {
		d.ledger.Undo(d.worker, rank, uint64(promptTokens))
	}
	return nil
}

func (d *Dispatcher) recordLocked(r, promptTokens int) {
	d.ranks[r].sent++
	d.ranks[r].sentTokens += uint64(promptTokens)
	if d.ledger != nil {
		d.ledger.Add(d.worker, r, uint64(promptTokens))
	}
}

// pendingLocked is what was dispatched to rank r and its last report does
// not acknowledge: this worker's dispatches, or every worker's with a shared
// ledger.
func (d *Dispatcher) pendingLocked(r int) (requests, promptTokens uint64) {
	rs := &d.ranks[r]
	if d.ledger == nil {
		return pending(rs.sent, rs.load.Received), pending(rs.sentTokens, rs.load.ReceivedTokens)
	}
	for w := range d.workers {
		sent, sentTokens := d.ledger.Sent(w, r)
		var acked, ackedTokens uint64
		switch {
		case w == d.worker:
			acked, ackedTokens = rs.load.Received, rs.load.ReceivedTokens
		case w < len(rs.load.ReceivedAll) && w < len(rs.load.ReceivedTokensAll):
			acked, ackedTokens = rs.load.ReceivedAll[w], rs.load.ReceivedTokensAll[w]
		}
		requests += pending(sent, acked)
		promptTokens += pending(sentTokens, ackedTokens)
	}
	return requests, promptTokens
}

func (d *Dispatcher) pickRoundRobinLocked() int {
	n := len(d.ranks)
	for i := range n {
		r := (d.next + i) % n
		if _, down := d.downLocked(r); !down {
			return r
		}
	}
	return -1
}

// pickLeastLoadedLocked implements ShortestQueue and MinimumTokens.
//
// With one worker it is plain argmin (ties rotate). With W workers it also
// avoids the herd where every worker, seeing the same reports, sends its
// next request to the same least-loaded rank: a rank qualifies when its
// score is within (W-1) requests' worth of the minimum, and the first
// qualifying rank from this worker's rotating start wins. Workers start
// their rotations at different ranks, so near-equal ranks are shared out
// while a rank far below the rest still takes everyone's requests.
func (d *Dispatcher) pickLeastLoadedLocked() int {
	tokens := d.method == MinimumTokens
	// Compare fractions of capacity only when every candidate reports one,
	// so ranks with different KV sizes fill evenly; otherwise raw tokens.
	relative := tokens
	minScore, argmin, anyUp := math.Inf(1), -1, false
	for r := range d.ranks {
		_, down := d.downLocked(r)
		d.up[r] = !down
		if down {
			continue
		}
		anyUp = true
		if d.ranks[r].load.KVTokensCapacity <= 0 {
			relative = false
		}
	}
	if !anyUp {
		return -1
	}
	// Without a shared ledger, this worker's unacknowledged dispatches stand
	// in for everyone's (see WithWorkers); with one, pending load is exact.
	weight, slack := float64(d.workers), float64(d.workers-1)
	if d.ledger != nil {
		weight, slack = 1, 0
	}
	for r := range d.ranks {
		if !d.up[r] {
			continue
		}
		rs := &d.ranks[r]
		pendingReqs, pendingTokens := d.pendingLocked(r)
		var score float64
		if tokens {
			score = float64(rs.load.KVTokensUsed) + float64(rs.load.WaitingTokens) +
				weight*float64(pendingTokens)
			if relative {
				score /= float64(rs.load.KVTokensCapacity)
			}
		} else {
			score = float64(rs.load.Running) + float64(rs.load.Waiting) + weight*float64(pendingReqs)
		}
		d.score[r] = score
		if score < minScore {
			minScore, argmin = score, r
		}
	}
	n := len(d.ranks)
	for i := range n {
		r := (d.next + i) % n
		if !d.up[r] {
			continue
		}
		cost := 1.0
		if tokens {
			// What the other workers are about to send is unknown; a
			// typical prompt is the best guess.
			cost = d.meanPrompt
			if relative {
				cost /= float64(d.ranks[r].load.KVTokensCapacity)
			}
		}
		if d.score[r]-slack*cost <= minScore {
			return r
		}
	}
	return argmin // not reached: the argmin itself qualifies
}

// pending is sent minus acknowledged, clamped at zero (a rank that restarted
// may acknowledge more than this ledger remembers until it is expired and comes back).
func pending(sent, acked uint64) uint64 {
	if acked >= sent {
		return 0
	}
	return sent - acked
}

// downLocked reports whether rank r is out of dispatch, and why.
func (d *Dispatcher) downLocked(r int) (string, bool) {
	rs := &d.ranks[r]
	switch {
	case rs.silent != "":
		return rs.silent, true
	case d.awaitFirst && !rs.hasReport:
		return fmt.Sprintf("rank %d has not reported yet (schedulerd loading or not started)", r), true
	}
	return "", false
}

// watchedAtLocked is the watched clock at now: what it read at the last
// Expire plus the time since, counted up to the watch gap.
func (d *Dispatcher) watchedAtLocked(now time.Time) time.Duration {
	since := max(now.Sub(d.lastExpire), 0)
	if d.watchGap > 0 {
		since = min(since, d.watchGap)
	}
	return d.watched + since
}

// heardLocked records that rank r was heard from at now.
func (d *Dispatcher) heardLocked(r int, now time.Time) {
	d.ranks[r].heardAt, d.ranks[r].heardWatch = now, d.watchedAtLocked(now)
}

// Expire declares down every rank that is up and has been silent (no accepted
// report since creation) for more than the stale timeout of
// watched time (see WithWatchGap), and returns them: the caller fails their
// in-flight requests. A rank stays down until its next report.
func (d *Dispatcher) Expire(now time.Time) []int {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.watched = d.watchedAtLocked(now)
	d.lastExpire = now
	if d.staleAfter <= 0 {
		return nil
	}
	var expired []int
	for r := range d.ranks {
		rs := &d.ranks[r]
		if rs.silent != "" || (d.awaitFirst && !rs.hasReport) {
			continue
		}
		age := d.watched - rs.heardWatch
		if age <= d.staleAfter {
			continue
		}
		if rs.hasReport {
			rs.silent = fmt.Sprintf("no load report from rank %d for %v (stale after %v)", r, age.Round(time.Millisecond), d.staleAfter)
		} else {
			rs.silent = fmt.Sprintf("rank %d never reported in %v (stale after %v)", r, age.Round(time.Millisecond), d.staleAfter)
		}
		expired = append(expired, r)
	}
	return expired
}

func (d *Dispatcher) allDownErrLocked() error {
	reasons := make([]string, len(d.ranks))
	for r := range d.ranks {
		reasons[r], _ = d.downLocked(r)
	}
	return fmt.Errorf("pick rank (worker %d, %d ranks): %w: %q", d.worker, len(d.ranks), ErrNoRankUp, reasons)
}

// ReportResult says what a load report did.
type ReportResult uint8

// Report results.
const (
	// ReportStale: the report's Seq is not above the last accepted one
	// (reordered or duplicated); it was ignored.
	ReportStale ReportResult = iota
	// ReportAccepted: the report is the rank's latest.
	ReportAccepted
	// ReportCameUp: the report is the rank's first, or the first since Expire
	// declared it down; the rank is back in dispatch.
	ReportCameUp
)

// Accepted reports whether the report was taken (not stale).
func (r ReportResult) Accepted() bool { return r != ReportStale }

// Report records a load report from rank. An accepted report also counts as a
// heartbeat. A report from a rank that Expire declared down brings it back
// with a clean slate: the rank (or what relays its reports) has most likely
// restarted, and its Seq and acknowledgements with it.
func (d *Dispatcher) Report(rank int, load Load) (ReportResult, error) {
	if err := d.checkRank(rank); err != nil {
		return ReportStale, fmt.Errorf("load report: %w", err)
	}
	if load.Running < 0 || load.Waiting < 0 || load.KVTokensUsed < 0 || load.KVTokensCapacity < 0 || load.WaitingTokens < 0 {
		return ReportStale, fmt.Errorf("load report from rank %d: negative field in %+v", rank, load)
	}
	now := d.now()
	d.mu.Lock()
	defer d.mu.Unlock()
	rs := &d.ranks[rank]
	result := ReportAccepted
	switch {
	case rs.silent != "":
		d.resetLocked(rank, now)
		result = ReportCameUp
	case !rs.hasReport && d.awaitFirst:
		result = ReportCameUp
	case rs.hasReport && load.Seq <= rs.load.Seq:
		return ReportStale, nil
	}
	// Copy the per-worker acknowledgements: the caller's slices belong to its
	// decode buffers.
	load.ReceivedAll = append(rs.load.ReceivedAll[:0], load.ReceivedAll...)
	load.ReceivedTokensAll = append(rs.load.ReceivedTokensAll[:0], load.ReceivedTokensAll...)
	load.WaitingByPriority = append(rs.load.WaitingByPriority[:0], load.WaitingByPriority...)
	rs.load, rs.hasReport = load, true
	d.heardLocked(rank, now)
	return result, nil
}

// resetLocked forgets everything known about rank: its last report (so a
// restarted rank's Seq may start over) and the ledger of dispatches to it
// (lost with the old process).
func (d *Dispatcher) resetLocked(rank int, now time.Time) {
	rs := &d.ranks[rank]
	*rs = rankState{}
	d.heardLocked(rank, now)
	if d.ledger != nil {
		d.ledger.Reset(d.worker, rank)
	}
	if d.prefix != nil {
		d.prefix.forget(rank) // a rank that comes back has most likely restarted: its cache is empty
	}
}

func (d *Dispatcher) checkRank(rank int) error {
	if rank < 0 || rank >= len(d.ranks) {
		return fmt.Errorf("rank %d out of range [0, %d)", rank, len(d.ranks))
	}
	return nil
}

// RankLoad is one rank's row in a Snapshot.
type RankLoad struct {
	Rank       int    `json:"rank"`
	Up         bool   `json:"up"`
	DownReason string `json:"down_reason,omitempty"`
	// HasReport is false until the first report; Reported is then zero.
	HasReport bool `json:"has_report"`
	Reported  Load `json:"reported"`
	// Sent is every dispatch from this worker; Pending and PendingTokens are
	// the dispatches (of every worker, with a shared ledger) that the last
	// report does not acknowledge yet.
	Sent          uint64 `json:"sent"`
	Pending       uint64 `json:"pending"`
	PendingTokens uint64 `json:"pending_tokens"`
	// LastReportAgeSeconds is the time since the last accepted report (or
	// since creation if later).
	LastReportAgeSeconds float64 `json:"last_report_age_s"`
}

// Snapshot is the dispatcher state served by /get_load.
type Snapshot struct {
	Worker            int        `json:"worker"`
	Workers           int        `json:"workers"`
	Method            string     `json:"method"`
	StaleAfterSeconds float64    `json:"stale_after_s"`
	Ranks             []RankLoad `json:"ranks"`
}

// Snapshot returns a consistent copy of the load table and ledger.
func (d *Dispatcher) Snapshot() Snapshot {
	now := d.now()
	d.mu.Lock()
	defer d.mu.Unlock()
	s := Snapshot{
		Worker:            d.worker,
		Workers:           d.workers,
		Method:            d.method.String(),
		StaleAfterSeconds: d.staleAfter.Seconds(),
		Ranks:             make([]RankLoad, len(d.ranks)),
	}
	for r := range d.ranks {
		rs := &d.ranks[r]
		reason, down := d.downLocked(r)
		pendingReqs, pendingTokens := d.pendingLocked(r)
		reported := rs.load
		reported.ReceivedAll, reported.ReceivedTokensAll = nil, nil // d.mu guards them
		reported.WaitingByPriority = slices.Clone(reported.WaitingByPriority)
		s.Ranks[r] = RankLoad{
			Rank:                 r,
			Up:                   !down,
			DownReason:           reason,
			HasReport:            rs.hasReport,
			Reported:             reported,
			Sent:                 rs.sent,
			Pending:              pendingReqs,
			PendingTokens:        pendingTokens,
			LastReportAgeSeconds: now.Sub(rs.heardAt).Seconds(),
		}
	}
	return s
}

// PriorityCount is the number of a rank's waiting requests of one priority value.
type PriorityCount struct {
	Priority int   `json:"priority"`
	Count    int64 `json:"count"`
}
