// Package grammar compiles JSON Schemas, free JSON objects, regular
// expressions, GBNF grammars (llama.cpp's syntax, gbnf.go) and choices among
// strings into byte-level automata and computes, for each decoding step, the
// mask of vocabulary tokens that keep the output inside the language.
//
// # Automaton
//
// A schema or regex becomes a recursive transition network over bytes
// (builder.go): nodes with byte-range edges, epsilon edges, rule calls (one
// rule per distinct conjunction of subschemas, so `$ref` recursion is a
// call) and rule ends. Nodes hold no pointers (edges are flattened into
// Grammar.edges and Grammar.eps), so cached grammars cost the GC nothing.
//
// It is determinized lazily (dfa.go): a DFA state is the sorted set of
// (node, hash-consed call stack) configurations after epsilon, call and
// return closure. Because the stack is part of the state, every token mask
// is a pure function of the DFA state and is cached on it (cachedMask):
// FillMask is a copy plus a few bit sets. Transition rows ([256]int32 per
// state) are made on the first step from a state.
//
// # Masks
//
// A mask is a walk of the vocabulary trie (preorder arrays with subtree-skip
// pointers) stepping the DFA; a dead prefix skips its whole subtree
// (masks.go). Shortcuts, each checked against the plain walk by
// TestLocalMasksMatchFullWalk, TestMaskPathsMatchFullWalk and TestMergeMasks:
//
//   - Stack-independent masks (localOf, localMaskOf): when every
//     configuration of a state shares one non-root stack, the mask comes from
//     the twin state whose stack is a "hole" of the same depth: tokens that
//     never leave the frame are accepted under any caller and cached once;
//     only trie subtrees after which the frame may have ended are walked from
//     the real state. "The same string inside array item 1..N" does not
//     re-walk the vocabulary per item.
//   - Split by stack (splitByStack, mergeMasks): a token is accepted from a set
//     of configurations iff it is accepted from one of them, so the mask of a
//     state mixing call frames is the union of its parts' cached masks.
//     Objects let extra (open) keys loop only at hub positions (after a
//     member or an extra member, and at the start), never on the skip chain
//     of optional properties: the same language, but one open-key call site
//     per position instead of one per remaining property.
//   - Free string bodies (stringbody.go): the body of an unconstrained JSON
//     string is one fixed 13-substate automaton (strict UTF-8, escapes); a
//     state whose configurations all sit in one substate takes its mask from
//     per-Compiler tables: the tokens that stay inside (copied) plus a walk
//     of the small trie of tokens that close the string. walkVocab
//     dispatches on the first byte so states that enter a free body after
//     one byte (key exclusions, minLength, patterns with a free tail) use the
//     tables too.
//   - Length-only strings: char-boundary nodes carry the chars left
//     (node.charsLeft); the mask is vocabTables.cnt[left] (tokens spelling at
//     most that many chars) plus a walk of the closing-token trie.
//   - Class runs and total states (charruns.go): a char-DFA state that surely
//     takes r more chars of one printable ASCII class accepts whole trie
//     subtrees of that class no deeper than r; a state from which any char
//     sequence stays alive accepts every subtree whose tokens spell only
//     constrained-string chars (trie.cons).
//
// # Constrained strings
//
// Patterns (ECMA-262 subset), formats, length bounds, propertyNames and "not
// a defined key" are code-point DFAs (package internal/chardfa), intersected
// by product and spelled as JSON-escaped UTF-8 (charstring.go). Large char
// DFAs (>= tailStates states) spell escapes and non-ASCII chars through
// rules shared per char set; a string automaton of >= 64 states is one rule
// per grammar, called at every use.
//
// # Soundness
//
// A document the grammar accepts always validates; where a keyword cannot be
// enforced exactly the compile fails with a named *Error or the grammar is
// narrower than the schema, never wider:
//
//   - oneOf as anyOf when branches are provably disjoint (types, enums, a
//     required property forbidden or const-discriminated in the other,
//     decided on what the schema says, not on what strict mode closes);
//     otherwise each branch is and-ed with the negations of the others
//     (exact, or refused);
//   - dependencies / dependentRequired / dependentSchemas as "the key is
//     absent, or present with what it brings";
//   - `$ref` siblings are and-ed (from draft 2019-09, or with no `$schema`);
//   - additional keys exclude every defined name, escaped or not, so a
//     defined name appears at most once; patternProperties keys are split by
//     which patterns they match;
//   - `\s`, `\S`, `\d`, `\w`, `.` take the narrowest meaning across regex
//     dialects, and in `not` of a pattern the widest (Python's Unicode classes,
//     '$' before a final newline), whose complement holds in every dialect;
//     dates exclude Feb 29 and leap seconds; email and hostname are
//     conservative subsets, uri and uri-reference RFC 3986's ASCII syntax;
//     none of these is negated (their complement would be too wide);
//   - numbers: integer ranges as exact digit-range regexes, integer multipleOf
//     by a mod-k DFA, bounded decimals exactly (m >= L and m <= H digit by
//     digit) but without an exponent, multipleOf 10^-p as at most p fraction
//     digits;
//   - a maxLength over 20000 (with a minLength up to 2048) allows at most
//     2048 chars;
//   - object members come in any order (buildObject, planPositions): an
//     object of up to exactKeySetProps named members remembers which were
//     written, each at most once; a larger one remembers its required
//     members (as a set, or in properties or required-list order when
//     there are too many), and its optional members, like extra keys, may
//     repeat (a validator keeps the last value, which was checked);
//     min/maxProperties objects keep schema order (buildCountedObject);
//   - `$ref` under a root `$schema` of draft 3 to 7 ignores its siblings,
//     as those drafts say;
//   - edges into nodes that cannot finish their rule are pruned at compile
//     time, so every prefix the masks allow can be completed.
//
// A schema that allows no document is a compile error naming the conflicting
// keywords (empty.go), never a grammar that fails at run time.
//
// `not` is compiled by rewriting its schema into the schema of what fails it
// (not.go), refused where that cannot be exact (or narrower): of an integer
// multipleOf k, the integers k does not divide and the numbers with a
// fraction; of additionalProperties, patternProperties or propertyNames,
// an object with a witness member (a key they govern whose value fails
// them, or a key failing propertyNames), written last (a later member with
// the same key would replace its value) and, among the extra keys,
// matching none of the object's patterns (objectWitness).
//
// minProperties/maxProperties beyond what the named members decide are
// counted (buildCountedObject; toward the minimum, extra keys count once, as
// a second may repeat the first); enum/const objects and arrays are checked
// against the rest of the schema.
//
// if/then/else holds as (if and then) or (not if and else).
//
// contains (minContains 1) tracks whether a matching item was seen; not of
// items is "contains the negation".
//
// uniqueItems holds over items from a small finite set of scalars (enum or
// const values, booleans, null; at most maxUniqueValues) by tracking the
// subset written; with at most one item it holds by itself.
//
// Refused by name: uniqueItems over other items, minContains over 1, maxContains,
// unevaluated*, $dynamicRef, counts over maxCountedPositions, oneOf whose
// branches may overlap and cannot be negated, formats duration, json-pointer,
// regex, uri-template and idn-*, lookaround, backreferences, \p{..}.
//
// # Costs
//
// Compiles are cached per Compiler (LRU bounded by count and by bytes, the
// DFA and masks counted as they grow: Grammar.Bytes); equal concurrent
// requests wait for one compile. A compile is bounded while it builds: the
// builder stops allocating at its node budget (Limits.MaxStates) and when
// the context of Compile ends (polled every few thousand nodes), and a
// stopped compile is not cached; GBNF repetitions are sized from the parse
// and refused before anything is built when they would expand past the
// budget (nested {m,n} counts multiply), and so are the alternatives a GBNF
// grammar has active at once (30,000 `.+` rules under one alternation are
// refused from their parse, over maxStateConfigs, before a node is built).
// Mask cost is bounded too: a compile
// explores the DFA from the start and refuses a state of more than
// maxStateConfigs configurations (a mask closes them once per trie node it
// steps), and computes the first masks within maxMaskOps units of work;
// Matcher.FillMaskWithin gives a mask up at a deadline. Free-form values
// (any JSON value) nest at most maxAnyDepth containers, a bound the grammar
// itself states, so masks never offer a bracket the DFA's stack cut
// (maxStackDepth) would strand; their rule has one call site per container,
// so a prefix has one parse. Regex DFAs are memoized process-wide. A
// schema is checked against its draft's metaschema (compiled once per
// process) before it is compiled (validation.go).
package grammar
