package cuda

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"unsafe"

	"github.com/llmserve/llmserve/backend"
	"github.com/llmserve/llmserve/backend/cuda/internal/dev"
	"github.com/llmserve/llmserve/sampling"
)

// maxTopLogprobs bounds SampleSpec.TopLogprobs on the device (OpenAI's limit is 20).
const maxTopLogprobs = 20

// sampleBuffers are the device buffers of on-device sampling, grown as needed.
type sampleBuffers struct {
	// rows, ints, floats and maskRows are the capacities.
	rows, ints, floats, maskRows         int
	work, specs, intBuf, floatBuf, masks dev.Ptr
	tok, lp, topIDs, topLP               dev.Ptr
	all                                  []dev.Ptr
}

func (s *sampleBuffers) free(d dev.Device) {
	for _, p := range s.all {
		_ = d.Free(p)
	}
	*s = sampleBuffers{}
}

// sampleInputs is the packed form of a step's SampleSpecs.
type sampleInputs struct {
	rows   []dev.SampleRow
	ints   []int32
	floats []float32
	// masks holds the constrained rows' bitmasks back to back ((VocabSize+63)/64 words each),
	// maskSpecs the spec index of each.
	masks     []uint64
	maskSpecs []int
	// seq is the batch index of each row, logprob whether its spec asked for the logprob.
	seq     []int
	logprob []bool
}

// packSpecs flattens the specs of the Seqs that have logits rows into SampleRows (masks are
// copied later, once final). logitRow[i] is the logits row sampled for Seq i (its last).
func packSpecs(specs []backend.SampleSpec, logitRow []int, vocab int) (*sampleInputs, error) {
	in := &sampleInputs{}
	for i := range specs {
		if logitRow[i] < 0 {
			continue
		}
		s := &specs[i]
		if s.TopLogprobs < 0 || s.TopLogprobs > maxTopLogprobs {
			return nil, fmt.Errorf("seq %d: %d top logprobs, at most %d", i, s.TopLogprobs, maxTopLogprobs)
		}
		if len(s.GenCounts) != len(s.Generated) {
			return nil, fmt.Errorf("seq %d: %d generated ids with %d counts", i, len(s.Generated), len(s.GenCounts))
		}
		r := dev.SampleRow{
			LogitRow: int32(logitRow[i]), Temperature: s.Temperature, TopP: s.TopP, MinP: s.MinP, TopK: s.TopK,
			RepPenalty: s.RepetitionPenalty, FreqPenalty: s.FrequencyPenalty, PresPenalty: s.PresencePenalty,
			MaskRow: -1, SeedLo: uint32(s.Seed), SeedHi: uint32(s.Seed >> 32), Step: s.Step, TopLogprobs: int32(s.TopLogprobs),
		}
		if r.RepPenalty == 0 {
			r.RepPenalty = 1 // a zero spec means no penalty
		}
		if r.TopP == 0 {
			r.TopP = 1
		}
		r.BiasOff, r.BiasLen, r.BiasValOff = int32(len(in.ints)), int32(len(s.Bias)), int32(len(in.floats))
		for _, bias := range s.Bias {
			in.ints = append(in.ints, bias.ID)
			in.floats = append(in.floats, bias.Value)
			if bias.Value >= sampling.MaxBias && bias.ID >= 0 && int(bias.ID) < vocab {
				r.Forced = 1
			}
		}
		r.SeenOff, r.SeenLen = int32(len(in.ints)), int32(len(s.Seen))
		in.ints = append(in.ints, s.Seen...)
		r.GenOff, r.GenLen = int32(len(in.ints)), int32(len(s.Generated))
		in.ints = append(in.ints, s.Generated...)
		in.ints = append(in.ints, s.GenCounts...)
		r.BanOff, r.BanLen = int32(len(in.ints)), int32(len(s.Ban))
		in.ints = append(in.ints, s.Ban...)
		if s.Mask != nil {
			r.MaskRow = int32(len(in.maskSpecs))
			in.maskSpecs = append(in.maskSpecs, i)
		}
		in.rows = append(in.rows, r)
		in.seq = append(in.seq, i)
		in.logprob = append(in.logprob, s.Logprob)
	}
	return in, nil
}

// ensureSample grows the sampling buffers.
func (b *Backend) ensureSample(in *sampleInputs, words int) error {
	s := &b.samp
	if len(in.rows) <= s.rows && len(in.ints) <= s.ints && len(in.floats) <= s.floats && len(in.maskSpecs) <= s.maskRows {
		return nil
	}
	rows := max(len(in.rows), 2*s.rows, 16)
	ints := max(len(in.ints), 2*s.ints, 1024)
	floats := max(len(in.floats), 2*s.floats, 256)
	maskRows := max(len(in.maskSpecs), 2*s.maskRows, 4)
	s.free(b.d)
	v := b.cfg.VocabSize
	var err error
	alloc := func(p *dev.Ptr, n int) {
		if err != nil {
			return
		}
		if *p, err = b.d.Alloc(int64(n)); err == nil {
			s.all = append(s.all, *p)
		}
	}
	alloc(&s.work, 4*rows*v)
	alloc(&s.specs, rows*int(unsafe.Sizeof(dev.SampleRow{})))
	alloc(&s.intBuf, 4*ints)
	alloc(&s.floatBuf, 4*floats)
	alloc(&s.masks, 8*maskRows*words)
	alloc(&s.tok, 4*rows)
	alloc(&s.lp, 4*rows)
	alloc(&s.topIDs, 4*rows*maxTopLogprobs)
	alloc(&s.topLP, 4*rows*maxTopLogprobs)
	if err != nil {
		s.free(b.d)
		return fmt.Errorf("sampling buffers: %w", err)
	}
	s.rows, s.ints, s.floats, s.maskRows = rows, ints, floats, maskRows
	return nil
}

// ForwardSample runs the step and samples every Seq with Logits on the device. See
// backend.DeviceSampler.
func (b *Backend) ForwardSample(ctx context.Context, batch *backend.Batch, specs []backend.SampleSpec, masks func()) (picks []backend.Pick, rows [][]float32, err error) {
	// the whole step on the device's goroutine: its launches go straight to the driver (masks
	// waits there for host goroutines only)
	ran := false
	err = b.d.Run(func() error {
		ran = true
		var err error
		picks, rows, err = b.forwardSample(ctx, batch, specs, masks)
		return err
	})
	if !ran && masks != nil {
		masks() // the device refused the call (closed): masks still runs once
	}
	return picks, rows, err
}

func (b *Backend) forwardSample(ctx context.Context, batch *backend.Batch, specs []backend.SampleSpec, masks func()) ([]backend.Pick, [][]float32, error) {
	// masks is called exactly once on every path, failures included: the scheduler's mask
	// goroutines finish before it returns.
	masksDone := false
	finishMasks := func() {
		if masks != nil && !masksDone {
			masksDone = true
			masks()
		}
	}
	defer finishMasks()
	if batch == nil || len(batch.Seqs) == 0 {
		return nil, nil, nil
	}
	if len(specs) != len(batch.Seqs) {
		return nil, nil, fmt.Errorf("cuda sample: %d specs for %d seqs", len(specs), len(batch.Seqs))
	}
	p, err := b.run(ctx, batch)
	finishMasks() // the forward is enqueued: the grammar masks finished while the device ran
	if err != nil {
		return nil, nil, fmt.Errorf("cuda forward: %w", err)
	}
	logitRow := make([]int, len(batch.Seqs))
	wantRows := make([]bool, len(batch.Seqs))
	anyRows := false
	for i := range batch.Seqs {
		logitRow[i] = -1
		if p.seqLogitN[i] > 0 {
			logitRow[i] = p.seqLogits[i] + p.seqLogitN[i] - 1
		}
		wantRows[i] = batch.Seqs[i].AllLogits
		anyRows = anyRows || wantRows[i]
	}
	in, err := packSpecs(specs, logitRow, b.cfg.VocabSize)
	if err != nil {
		return nil, nil, fmt.Errorf("cuda sample: %w", err)
	}
	words := (b.cfg.VocabSize + 63) / 64
	for _, i := range in.maskSpecs {
		m := specs[i].Mask
		if len(m) < words {
			return nil, nil, fmt.Errorf("cuda sample: seq %d: mask of %d words, vocabulary needs %d", i, len(m), words)
		}
		in.masks = append(in.masks, m[:words]...)
	}
	picks := make([]backend.Pick, len(batch.Seqs))
	if len(in.rows) > 0 {
		if err := b.sample(in, words, picks); err != nil {
			return nil, nil, fmt.Errorf("cuda sample: %w", err)
		}
	}
	var rows [][]float32
	if anyRows {
		if rows, err = b.hostRows(p, wantRows); err != nil {
			return nil, nil, fmt.Errorf("cuda forward: %w", err)
		}
	}
	return picks, rows, nil
}

// sample uploads the packed specs, runs the two sampling kernels and reads the picks back.
func (b *Backend) sample(in *sampleInputs, words int, picks []backend.Pick) error {
	if err := b.ensureSample(in, words); err != nil {
		return err
	}
	s, d := &b.samp, b.d
	n := len(in.rows)
	rowBytes := unsafe.Slice((*byte)(unsafe.Pointer(&in.rows[0])), n*int(unsafe.Sizeof(dev.SampleRow{})))
	uploads := []struct {
		dst dev.Ptr
		src []byte
	}{{s.specs, rowBytes}, {s.intBuf, i32Bytes(in.ints)}, {s.floatBuf, f32Bytes(in.floats)}}
	if len(in.masks) > 0 {
		uploads = append(uploads, struct {
			dst dev.Ptr
			src []byte
		}{s.masks, unsafe.Slice((*byte)(unsafe.Pointer(&in.masks[0])), 8*len(in.masks))})
	}
	for _, u := range uploads {
		if len(u.src) == 0 {
			continue
		}
		if err := d.Upload(u.dst, u.src); err != nil {
			return err
		}
	}
	v := int32(b.cfg.VocabSize)
	if err := launch(d, dev.KSamplePrep, dev.D1(n), dev.D1(256), &dev.SamplePrepArgs{
		Work: s.work, Logits: b.buf.logits, Specs: s.specs, Ints: s.intBuf, Floats: s.floatBuf, Masks: s.masks,
		Rows: int32(n), Vocab: v, MaskWords: int32(words)}); err != nil {
		return err
	}
	if err := launch(d, dev.KSamplePick, dev.D1(n), dev.D1(256), &dev.SamplePickArgs{
		Work: s.work, Logits: b.buf.logits, Specs: s.specs, Ints: s.intBuf, Masks: s.masks, OutToken: s.tok,
		OutLogprob: s.lp, OutTopIDs: s.topIDs, OutTopLogprobs: s.topLP, Rows: int32(n), Vocab: v,
		MaskWords: int32(words), MaxTop: maxTopLogprobs}); err != nil {
		return err
	}
	tok := make([]byte, 4*n)
	lp := make([]byte, 4*n)
	topIDs := make([]byte, 4*n*maxTopLogprobs)
	topLP := make([]byte, 4*n*maxTopLogprobs)
	for _, c := range []struct {
		dst []byte
		src dev.Ptr
	}{{tok, s.tok}, {lp, s.lp}, {topIDs, s.topIDs}, {topLP, s.topLP}} {
		if err := d.Download(c.dst, c.src); err != nil {
			return err
		}
	}
	le := binary.LittleEndian
	for j, r := range in.rows {
		pk := &picks[in.seq[j]]
		pk.Token = int32(le.Uint32(tok[4*j:]))
		if in.logprob[j] && pk.Token >= 0 {
			pk.Logprob = math.Float32frombits(le.Uint32(lp[4*j:]))
		}
		for t := range int(r.TopLogprobs) {
			at := 4 * (j*maxTopLogprobs + t)
			pk.TopIDs = append(pk.TopIDs, int32(le.Uint32(topIDs[at:])))
			pk.TopLogprobs = append(pk.TopLogprobs, math.Float32frombits(le.Uint32(topLP[at:])))
		}
	}
	return nil
}
