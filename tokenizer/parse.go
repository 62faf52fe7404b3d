package tokenizer

import (
	"encoding/json"
	"fmt"
)

// tokenizerJSON holds the parts of tokenizer.json other than the model.
type tokenizerJSON struct {
	AddedTokens   []addedToken
	Normalizer    json.RawMessage
	PreTokenizer  json.RawMessage
	PostProcessor json.RawMessage
	Decoder       json.RawMessage
}

// rawModel is tokenizer.json's model, with the vocab and merges read by the fast scanner.
type rawModel struct {
	Type                    string
	IgnoreMerges            bool
	ByteFallback            bool
	UnkToken                *string
	FuseUnk                 bool
	Dropout                 *float64
	ContinuingSubwordPrefix *string
	EndOfWordSuffix         *string

	vocabToks      []string
	vocabIDs       []int32
	vocabNotObject bool
	hasMerges      bool
	// merge r is mergeBlob[mergeOff[3r]:mergeOff[3r+1]] + " " + mergeBlob[mergeOff[3r+1]:mergeOff[3r+2]]
	mergeBlob []byte
	mergeOff  []uint32
}

func parseTokenizerJSON(data []byte) (*tokenizerJSON, *rawModel, error) {
	j := &jscan{data: data}
	tj := &tokenizerJSON{}
	var model *rawModel
	err := j.object(func(key []byte) error {
		switch string(key) {
		case "model":
			if j.peek() == 'n' {
				_, err := j.skip(0)
				model = nil
				return err
			}
			m, err := parseModel(j)
			model = m
			return err
		case "added_tokens":
			raw, err := j.skip(0)
			if err != nil {
				return err
			}
			tj.AddedTokens = nil
			if err := json.Unmarshal(raw, &tj.AddedTokens); err != nil {
				return fmt.Errorf("added_tokens: %w", err)
			}
			return nil
		}
		raw, err := j.skip(0)
		if err != nil {
			return err
		}
		switch string(key) {
		case "normalizer":
			tj.Normalizer = raw
		case "pre_tokenizer":
			tj.PreTokenizer = raw
		case "post_processor":
			tj.PostProcessor = raw
		case "decoder":
			tj.Decoder = raw
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	if err := j.end(); err != nil {
		return nil, nil, err
	}
	return tj, model, nil
}

func parseModel(j *jscan) (*rawModel, error) {
	m := &rawModel{}
	err := j.object(func(key []byte) error {
		switch string(key) {
		case "vocab":
			m.vocabToks, m.vocabIDs = m.vocabToks[:0], m.vocabIDs[:0]
			if j.peek() != '{' {
				m.vocabNotObject = true
				_, err := j.skip(0)
				return err
			}
			m.vocabNotObject = false
			return j.object(func(tok []byte) error {
				id, err := j.int()
				if err != nil {
					return err
				}
				if id < 0 || id >= maxID {
					return fmt.Errorf("vocab id %d out of range", id)
				}
				m.vocabToks = append(m.vocabToks, string(tok))
				m.vocabIDs = append(m.vocabIDs, int32(id))
				return nil
			})
		case "merges":
			if j.peek() == 'n' {
				_, err := j.skip(0)
				return err
			}
			m.hasMerges = true
			m.mergeBlob, m.mergeOff = m.mergeBlob[:0], m.mergeOff[:0]
			return j.array(func() error { return parseMerge(j, m) })
		}
		raw, err := j.skip(0)
		if err != nil {
			return err
		}
		var dst any
		switch string(key) {
		case "type":
			dst = &m.Type
		case "ignore_merges":
			dst = &m.IgnoreMerges
		case "byte_fallback":
			dst = &m.ByteFallback
		case "unk_token":
			dst = &m.UnkToken
		case "fuse_unk":
			dst = &m.FuseUnk
		case "dropout":
			dst = &m.Dropout
		case "continuing_subword_prefix":
			dst = &m.ContinuingSubwordPrefix
		case "end_of_word_suffix":
			dst = &m.EndOfWordSuffix
		default:
			return nil
		}
		if err := json.Unmarshal(raw, dst); err != nil {
			return fmt.Errorf("model.%s: %w", key, err)
		}
		return nil
	})
	return m, err
}

// parseMerge reads one merge rule, "a b" or ["a", "b"].
func parseMerge(j *jscan, m *rawModel) error {
	if len(m.mergeBlob) > 1<<30 {
		return fmt.Errorf("merges too large")
	}
	start := uint32(len(m.mergeBlob))
	switch j.peek() {
	case '"':
		s, err := j.str()
		if err != nil {
			return err
		}
		sp := -1
		for i, c := range s {
			if c == ' ' {
				if sp >= 0 {
					return fmt.Errorf("merge %q has more than two parts", s)
				}
				sp = i
			}
		}
		if sp < 0 {
			return fmt.Errorf("merge %q is not two tokens separated by a space", s)
		}
		m.mergeBlob = append(m.mergeBlob, s...)
		m.mergeOff = append(m.mergeOff, start, start+uint32(sp), uint32(len(m.mergeBlob)))
		// Drop the space: parts are [start, start+sp) and [start+sp+1, end).
		copy(m.mergeBlob[start+uint32(sp):], m.mergeBlob[start+uint32(sp)+1:])
		m.mergeBlob = m.mergeBlob[:len(m.mergeBlob)-1]
		m.mergeOff[len(m.mergeOff)-1]--
		return nil
	case '[':
		parts := 0
		var mid uint32
		err := j.array(func() error {
			s, err := j.str()
			if err != nil {
				return err
			}
			parts++
			if parts == 2 {
				mid = uint32(len(m.mergeBlob))
			}
			m.mergeBlob = append(m.mergeBlob, s...)
			return nil
		})
		if err != nil {
			return err
		}
		if parts != 2 {
			return fmt.Errorf("merge has %d parts, want 2", parts)
		}
		m.mergeOff = append(m.mergeOff, start, mid, uint32(len(m.mergeBlob)))
		return nil
	}
	return fmt.Errorf("merge must be a string or a pair of strings")
}
