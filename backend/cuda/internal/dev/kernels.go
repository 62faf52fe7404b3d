package dev

import "reflect"

// Kernel names one kernel of backend/cuda/kernels.
type Kernel int

// The kernels. Each has an argument struct below, in the order of the kernel's parameters.
const (
	KEmbed Kernel = iota
	KRMSNorm
	KGemm
	KQKVPost
	KAttnDecode
	KAttnMerge
	KAttnPrefill
	KSwiGLU
	KResidualAdd
	KSamplePrep
	KSamplePick
	KFillBF16
	KGemv
	KGemvQ8_0
	KGemvQ4_K
	KGemmQ
	KEmbedQ
	KCastBF16
	NumKernels
)

// KernelInfo is a kernel's entry in the table.
type KernelInfo struct {
	// Name is the extern "C" symbol, File the .cu source holding it.
	Name, File string
	// Args is the argument struct's type.
	Args reflect.Type
}

// Kernels is the table, indexed by Kernel.
var Kernels = [NumKernels]KernelInfo{
	KEmbed:       {"embed_gather", "elementwise.cu", reflect.TypeFor[EmbedArgs]()},
	KRMSNorm:     {"rmsnorm", "elementwise.cu", reflect.TypeFor[RMSNormArgs]()},
	KGemm:        {"gemm_bf16", "gemm.cu", reflect.TypeFor[GemmArgs]()},
	KQKVPost:     {"qkv_post", "qkv_post.cu", reflect.TypeFor[QKVPostArgs]()},
	KAttnDecode:  {"attn_decode", "attention.cu", reflect.TypeFor[AttnDecodeArgs]()},
	KAttnMerge:   {"attn_merge", "attention.cu", reflect.TypeFor[AttnMergeArgs]()},
	KAttnPrefill: {"attn_prefill", "attention.cu", reflect.TypeFor[AttnPrefillArgs]()},
	KSwiGLU:      {"swiglu", "elementwise.cu", reflect.TypeFor[SwiGLUArgs]()},
	KResidualAdd: {"residual_add", "elementwise.cu", reflect.TypeFor[ResidualAddArgs]()},
	KSamplePrep:  {"sample_prep", "sample.cu", reflect.TypeFor[SamplePrepArgs]()},
	KSamplePick:  {"sample_pick", "sample.cu", reflect.TypeFor[SamplePickArgs]()},
	KFillBF16:    {"fill_bf16", "elementwise.cu", reflect.TypeFor[FillArgs]()},
	KGemv:        {"gemv_bf16", "gemv.cu", reflect.TypeFor[GemvArgs]()},
	KGemvQ8_0:    {"gemv_q8_0", "quant.cu", reflect.TypeFor[GemvArgs]()},
	KGemvQ4_K:    {"gemv_q4_k", "quant.cu", reflect.TypeFor[GemvArgs]()},
	KGemmQ:       {"gemm_q", "quant.cu", reflect.TypeFor[GemmQArgs]()},
	KEmbedQ:      {"embed_q", "quant.cu", reflect.TypeFor[EmbedQArgs]()},
	KCastBF16:    {"cast_bf16", "elementwise.cu", reflect.TypeFor[CastArgs]()},
}

func (k Kernel) String() string {
	if k < 0 || k >= NumKernels {
		return "kernel?"
	}
	return Kernels[k].Name
}

// PartitionTokens is the split-KV partition length of decode attention: the number of
// partitions follows from a row's context length alone, so a row's result never depends on the
// batch it runs in.
const PartitionTokens = 128

// EmbedArgs: Out[r][:H] = float(Table[IDs[r]][:H]) (a bf16 table, or f32 when TableF32 is
// 1; f32 rows). Grid (Rows).
type EmbedArgs struct {
	Out, Table, IDs   uint64
	Rows, H, TableF32 int32
}

// RMSNormArgs: Out[r] = W ⊙ X[src] / sqrt(mean(X[src]²) + Eps), src = RowIdx[r] (r when
// RowIdx is 0). f32 throughout. Grid (Rows).
type RMSNormArgs struct {
	Out, X, W, RowIdx uint64
	Rows, H           int32
	Eps               float32
}

// GemmArgs: Out[m][n] (+)= Σ_k bf16(X[m·Ldx+k]) · W[n][k] with bf16 W [N][K], f32 X and Out
// (row stride Ldo), f32 accumulation in k order; added to Out when Accumulate is 1. With WF32
// 1 the weights are f32 and X is used unrounded (float32 checkpoints). Grid (ceil(N/64),
// ceil(M/64)), block 256.
type GemmArgs struct {
	Out, X, W         uint64
	M, N, K, Ldx, Ldo int32
	Accumulate, WF32  int32
}

// QKVPostArgs: per row r and head h of the fused q|k|v row QKV[r] (f32, stride
// (NumHeads+2·NumKVHeads)·HeadDim): add Bias (0: none), RMS-normalise q and k heads by QNorm /
// KNorm (0: none), rotate q and k by RoPE at Pos[r] (RopeCos and RopeSin [position][HeadDim/2], the
// host's table, so angles are exact for any position; rotate_half pairing),
// and store k and v (bf16, or f32 when KVF32 is 1) in the layer's caches [block][kv head][BlockSize][HeadDim] at block
// Tables[RowSeq[r]·MaxBlocks + Pos[r]/BlockSize], slot Pos[r]%BlockSize. Grid (Rows,
// NumHeads+2·NumKVHeads), block 128.
type QKVPostArgs struct {
	QKV, Bias, QNorm, KNorm, RopeCos, RopeSin uint64
	KCache, VCache, Pos, RowSeq, Tables       uint64
	Rows, NumHeads, NumKVHeads, HeadDim       int32
	BlockSize, MaxBlocks, KVF32               int32
	Eps                                       float32
}

// AttnDecodeArgs: for each listed row Rows[i] (one query token at Pos), KV head g and
// partition p of PartitionTokens positions of [0, Pos]: the GQA group's heads' partial softmax
// (max PartM, sum PartL, unnormalised output PartO) over keys read through the block table.
// PartO is [NumRows][NumHeads][MaxParts][HeadDim], PartM/PartL [NumRows][NumHeads][MaxParts].
// Grid (NumRows, NumKVHeads, MaxParts), block 128.
type AttnDecodeArgs struct {
	QKV, KCache, VCache, Tables, RowSeq, Pos, Rows uint64
	PartO, PartM, PartL                            uint64
	NumRows, NumHeads, NumKVHeads, HeadDim         int32
	BlockSize, MaxBlocks, MaxParts, KVF32          int32
	Scale                                          float32
}

// AttnMergeArgs: Out[Rows[i]][h·HeadDim:] = the partitions of AttnDecode merged. Grid
// (NumRows, NumHeads), block 128.
type AttnMergeArgs struct {
	Out, PartO, PartM, PartL, Rows, Pos uint64
	NumRows, NumHeads, HeadDim          int32
	MaxParts                            int32
}

// AttnPrefillArgs: causal attention of the rows of each tile (Tiles[t] = {first row, rows},
// consecutive rows of one sequence) against that sequence's keys [0, Pos[row]] through the block
// table (the chunk's own K/V are already stored); Out [row][NumHeads·HeadDim]. Grid (NumTiles,
// NumHeads), block 128.
type AttnPrefillArgs struct {
	Out, QKV, KCache, VCache, Tables, RowSeq, Pos, Tiles uint64
	NumTiles, NumHeads, NumKVHeads, HeadDim              int32
	BlockSize, MaxBlocks, KVF32                          int32
	Scale                                                float32
}

// SwiGLUArgs: GU[r][:Inter] = silu(GU[r][:Inter]) · GU[r][Inter:2·Inter]. Grid (Rows).
type SwiGLUArgs struct {
	GU          uint64
	Rows, Inter int32
}

// ResidualAddArgs: X[r·Ld+i] += B[r·LdB+i] for i < N (LdB 0 broadcasts one bias row). Grid
// (Rows).
type ResidualAddArgs struct {
	X, B             uint64
	Rows, N, Ld, LdB int32
}

// SampleRow is one row's sampling parameters on the device (the Specs array of the sampling
// kernels): backend.SampleSpec flattened, its lists as offsets into the Ints and Floats buffers.
type SampleRow struct {
	// LogitRow is the row of the logits buffer to sample.
	LogitRow int32
	// Temperature below 1e-6 (or TopK 1) is greedy.
	Temperature, TopP, MinP float32
	// TopK <= 0 keeps every token.
	TopK                                 int32
	RepPenalty, FreqPenalty, PresPenalty float32
	// Bias ids are Ints[BiasOff:BiasOff+BiasLen], their values Floats[BiasValOff:]; Forced is 1
	// when a bias of +100 bans every token not biased +100.
	BiasOff, BiasLen, BiasValOff, Forced int32
	// Seen ids (repetition penalty) are Ints[SeenOff:+SeenLen]; generated ids
	// Ints[GenOff:+GenLen] with their counts at Ints[GenOff+GenLen:+GenLen]; banned ids
	// Ints[BanOff:+BanLen].
	SeenOff, SeenLen, GenOff, GenLen, BanOff, BanLen int32
	// MaskRow is the row of Masks ([rows][MaskWords] uint64, bit i%64 of word i/64 allows i),
	// -1 for none.
	MaskRow int32
	// SeedLo, SeedHi and Step give the draw's uniform number (sampling.Uniform(seed, step)).
	SeedLo, SeedHi, Step uint32
	// TopLogprobs is how many top logprobs to return (at most the pick's MaxTop).
	TopLogprobs int32
}

// SamplePrepArgs: Work[i] = Logits[Specs[i].LogitRow] with bias, penalties, ban and mask applied
// (the sampling package's order). Grid (Rows), block 256.
type SamplePrepArgs struct {
	Work, Logits, Specs, Ints, Floats, Masks uint64
	Rows, Vocab, MaskWords                   int32
}

// SamplePickArgs: per row i, the token (greedy argmax of Work, or the draw over the tokens that
// survive temperature, top-k, top-p and min-p, walked in id order), -1 when the mask allows
// none; its log-softmax under the raw Logits row, and the TopLogprobs best raw tokens (ties to
// the lower id). OutTopIDs and OutTopLogprobs are [Rows][MaxTop]. Grid (Rows), block 256.
type SamplePickArgs struct {
	Work, Logits, Specs, Ints, Masks uint64
	OutToken, OutLogprob             uint64
	OutTopIDs, OutTopLogprobs        uint64
	Rows, Vocab, MaskWords, MaxTop   int32
}

// FillArgs: Out[i] = bf16(Scale · (2·u(Seed, i) - 1)) for i < N, u uniform in [0, 1) from a
// counter hash: weights made on the device for benchmarks (no host initialisation of 16 GB).
// Grid (ceil(N/1024)), block 256.
type FillArgs struct {
	Out   uint64
	N     uint64
	Seed  uint32
	Scale float32
}

// GemvRows and GemvWarps are the decode GEMMs' geometry: a CTA of GemvWarps warps computes
// GemvWarps output columns for up to GemvRows rows, each weight row read once for them.
const (
	GemvRows  = 16
	GemvWarps = 8
)

// GemvGrid is the grid of a decode GEMM of m rows and n columns (block 32·GemvWarps): row
// groups along x, so that the groups sharing a column block run side by side and a weight row
// read for one is in L2 for the next.
func GemvGrid(m, n int) Dim3 {
	return Dim3{uint32((m + GemvRows - 1) / GemvRows), uint32((n + GemvWarps - 1) / GemvWarps), 1}
}

// GemvArgs: the decode rows' product Out[r][n] (+)= Σ_k X[r·Ldx+k] · W[n][k], r < M, f32
// accumulation per lane then a butterfly over the warp (see the kernels' comments for the exact
// order, which never depends on M). gemv_bf16: bf16 W, X rounded to bf16 as it is read, K % 8
// == 0; gemv_q8_0 / gemv_q4_k: W rows in llama.cpp's Q8_0 / Q4_K blocks, X unrounded, K a
// multiple of 32 / 256. Ldx % 4 == 0 (16-byte activation loads). Grid GemvGrid(M, N), block
// 32·GemvWarps.
type GemvArgs struct {
	Out, X, W         uint64
	M, N, K, Ldx, Ldo int32
	Accumulate        int32
}

// GemmQArgs: GemmArgs' tiled product for the prefill rows with W rows in the block quantization
// QType (quant.Q8_0 = 8 or quant.Q4_K = 12, GGML's numbering), each weight dequantized exactly as
// quant.Dequantize does, X unrounded. Grid (ceil(N/64), ceil(M/64)), block 256.
type GemmQArgs struct {
	Out, X, W         uint64
	M, N, K, Ldx, Ldo int32
	Accumulate, QType int32
}

// EmbedQArgs: Out[r][:H] = the dequantized row IDs[r] of a Q8_0 / Q4_K table (QType as
// GemmQArgs). Grid (Rows), block 256.
type EmbedQArgs struct {
	Out, Table, IDs uint64
	Rows, H, QType  int32
}

// CastArgs: Out[r·K+k] = bf16(X[r·Ldx+k]) for r < Rows, k < K (round to nearest even, as every
// GEMM rounds its activations): the bf16 operand of a library GEMM (MatmulArgs). Grid (Rows),
// block 256.
type CastArgs struct {
	Out, X       uint64
	Rows, K, Ldx int32
}
