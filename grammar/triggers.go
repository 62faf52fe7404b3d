package grammar

import (
	"slices"
	"unicode/utf8"

	"github.com/llmserve/llmserve/grammar/internal/chardfa"
)

// Limits of FreeText.WithoutAny: each trigger is automaton states, one per character.
const (
	maxTriggers     = 64
	maxTriggerChars = 4096 // all triggers together
)

// withoutAnyDFA is the char DFA of text that contains none of pats: an Aho-Corasick automaton
// over their runes (a state is the longest suffix read that is a prefix of some pattern; a state
// whose suffix chain ends a pattern is dead and left out), limited to most chars when most > 0.
func withoutAnyDFA(pats []string, most int) (*chardfa.DFA, error) {
	if len(pats) > maxTriggers {
		return nil, errf("composed grammar: %d triggers, over the limit of %d", len(pats), maxTriggers)
	}
	total := 0
	for _, p := range pats {
		if p == "" || !utf8.ValidString(p) {
			return nil, errf("composed grammar: a trigger must be non-empty UTF-8, got %q", p)
		}
		total += utf8.RuneCountInString(p)
	}
	if total > maxTriggerChars {
		return nil, errf("composed grammar: triggers have %d characters together, over the limit of %d", total, maxTriggerChars)
	}
	// trie: node 0 is the root
	child := []map[rune]int{{}}
	dead := []bool{false}
	var alphabet []rune
	for _, p := range pats {
		n := 0
		for _, c := range p {
			alphabet = append(alphabet, c)
			next, ok := child[n][c]
			if !ok {
				next = len(child)
				child = append(child, map[rune]int{})
				dead = append(dead, false)
				child[n][c] = next
			}
			n = next
		}
		dead[n] = true
	}
	alphabet = slices.Compact(slices.Sorted(slices.Values(alphabet)))
	// breadth first: fail links, then the full transition function delta
	fail := make([]int, len(child))
	delta := make([][]int, len(child)) // delta[n][i]: the state after alphabet[i]
	order := []int{0}
	for k := 0; k < len(order); k++ {
		n := order[k]
		delta[n] = make([]int, len(alphabet))
		for i, c := range alphabet {
			if next, ok := child[n][c]; ok {
				if n == 0 {
					fail[next] = 0
				} else {
					fail[next] = delta[fail[n]][i]
				}
				dead[next] = dead[next] || dead[fail[next]]
				delta[n][i] = next
				order = append(order, next)
			} else if n != 0 {
				delta[n][i] = delta[fail[n]][i]
			}
		}
	}
	// number the live states, root first
	id := make([]int32, len(child))
	live := int32(0)
	for _, n := range order {
		id[n] = -1
		if !dead[n] {
			id[n] = live
			live++
		}
	}
	d := &chardfa.DFA{Trans: make([][]chardfa.Edge, live), Accept: make([]bool, live)}
	for _, n := range order {
		if dead[n] {
			continue
		}
		var out []chardfa.Edge
		lo := rune(0)
		for i, c := range alphabet {
			if lo <= c-1 {
				out = chardfa.AppendAny(out, lo, c-1, 0)
			}
			if to := delta[n][i]; !dead[to] {
				out = chardfa.AppendAny(out, c, c, id[to])
			}
			lo = c + 1
		}
		out = chardfa.AppendAny(out, lo, utf8.MaxRune, 0)
		d.Trans[id[n]] = out
		d.Accept[id[n]] = true
	}
	return counted(d, most), nil
}
