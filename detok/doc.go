// Package detok turns a request's stream of generated token ids into text deltas: incremental
// detokenization plus stop strings, with state bounded by the longest stop string. It is pure
// (no sockets): Detokenizer is detokd's step function (cmd/detokd owns the sockets around it),
// and Stream is also driven by the tokenizer worker that owns a request under
// --skip-detokenization.
package detok
