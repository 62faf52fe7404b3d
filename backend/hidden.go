package backend

// HiddenStates is an optional capability of a Backend: the model's final hidden states (after
// the final norm, before the LM head) of the last Forward, for embeddings. It is read after
// Forward, so Forward's contract and cost are unchanged for every request that does not ask.
type HiddenStates interface {
	// HiddenSize is the length of one token's hidden state.
	HiddenSize() int
	// Hidden writes the final hidden states of every token of Seq i of the last Forward into
	// dst (len(Tokens) rows of HiddenSize floats back to back, grown as needed) and returns it.
	// It fails when i is not a Seq of the last Forward or another Forward has run since.
	Hidden(i int, dst []float32) ([]float32, error)
}
