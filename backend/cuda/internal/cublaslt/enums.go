package cublaslt

import "fmt"

// The values below are NVIDIA's, from cublasLt.h, cublas_api.h and library_types.h (CUDA 12/13;
// mirrored in NVIDIA/TensorRT's plugin/common/cublasLtWrapper.h and in the generated bindings of
// public Rust crates): cublasLtMatmulDescAttributes_t, cublasLtMatrixLayoutAttribute_t,
// cublasLtMatmulPreferenceAttributes_t, cublasLtMatmulAlgoConfigAttributes_t,
// cublasLtReductionScheme_t, cublasComputeType_t, cudaDataType_t, cublasOperation_t and
// cublasStatus_t. They are ABI: a library that changed them would break every compiled caller.
const (
	// cublasComputeType_t
	computeType32F = 68 // CUBLAS_COMPUTE_32F: f32 accumulation, no down-conversion of inputs

	// cudaDataType_t
	dataR32F  = 0  // CUDA_R_32F
	dataR16BF = 14 // CUDA_R_16BF

	// cublasOperation_t
	opN = 0 // CUBLAS_OP_N
	opT = 1 // CUBLAS_OP_T

	// cublasLtMatmulDescAttributes_t
	descComputeType = 0 // CUBLASLT_MATMUL_DESC_COMPUTE_TYPE (int32)
	descScaleType   = 1 // CUBLASLT_MATMUL_DESC_SCALE_TYPE (int32, a cudaDataType_t)
	descTransA      = 3 // CUBLASLT_MATMUL_DESC_TRANSA (int32, a cublasOperation_t)
	descTransB      = 4 // CUBLASLT_MATMUL_DESC_TRANSB (int32)

	// cublasLtMatmulPreferenceAttributes_t
	prefMaxWorkspaceBytes = 1 // CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES (uint64)
	prefMinAlignA         = 5 // CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES (uint32)
	prefMinAlignB         = 6 // CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES
	prefMinAlignC         = 7 // CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES
	prefMinAlignD         = 8 // CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES

	// cublasLtMatmulAlgoConfigAttributes_t
	algoConfigID              = 0 // CUBLASLT_ALGO_CONFIG_ID (int32)
	algoConfigTileID          = 1 // CUBLASLT_ALGO_CONFIG_TILE_ID (uint32)
	algoConfigSplitKNum       = 2 // CUBLASLT_ALGO_CONFIG_SPLITK_NUM (uint32 in cublasLt.h, default 1)
	algoConfigReductionScheme = 3 // CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME (uint32)

	// cublasLtReductionScheme_t
	reductionNone = 0 // CUBLASLT_REDUCTION_SCHEME_NONE

	// sizes of the opaque structs passed by pointer: cublasLtMatmulAlgo_t is uint64_t data[8];
	// cublasLtMatmulHeuristicResult_t is {algo; size_t workspaceSize; cublasStatus_t state;
	// float wavesCount; int reserved[4]}.
	algoBytes      = 64
	heuristicBytes = algoBytes + 8 + 4 + 4 + 16
)

// Status is a cublasStatus_t.
type Status int32

// The statuses cuBLASLt returns (cublas_api.h).
const (
	StatusSuccess         Status = 0
	StatusNotInitialized  Status = 1
	StatusAllocFailed     Status = 3
	StatusInvalidValue    Status = 7
	StatusArchMismatch    Status = 8
	StatusMappingError    Status = 11
	StatusExecutionFailed Status = 13
	StatusInternalError   Status = 14
	StatusNotSupported    Status = 15
	StatusLicenseError    Status = 16
)

var statusNames = map[Status]string{
	StatusSuccess:         "CUBLAS_STATUS_SUCCESS",
	StatusNotInitialized:  "CUBLAS_STATUS_NOT_INITIALIZED",
	StatusAllocFailed:     "CUBLAS_STATUS_ALLOC_FAILED",
	StatusInvalidValue:    "CUBLAS_STATUS_INVALID_VALUE",
	StatusArchMismatch:    "CUBLAS_STATUS_ARCH_MISMATCH",
	StatusMappingError:    "CUBLAS_STATUS_MAPPING_ERROR",
	StatusExecutionFailed: "CUBLAS_STATUS_EXECUTION_FAILED",
	StatusInternalError:   "CUBLAS_STATUS_INTERNAL_ERROR",
	StatusNotSupported:    "CUBLAS_STATUS_NOT_SUPPORTED",
	StatusLicenseError:    "CUBLAS_STATUS_LICENSE_ERROR",
}

// String is the status's name in cublas_api.h.
func (s Status) String() string {
	if n, ok := statusNames[s]; ok {
		return n
	}
	return fmt.Sprintf("cublasStatus_t %d", int32(s))
}

// Error is a failed cuBLASLt call.
type Error struct {
	// Op is the function that failed.
	Op string
	// Status is what it returned.
	Status Status
}

func (e *Error) Error() string { return fmt.Sprintf("%s: %s", e.Op, e.Status) }
