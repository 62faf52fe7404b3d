package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"github.com/llmserve/llmserve/cmd/internal/runflags"
	"io"
	"os"

	"github.com/llmserve/llmserve/tokenizer"
	"github.com/llmserve/llmserve/tokenizer/chat"
	"github.com/urfave/cli/v3"
)

// tokenizeCommand reads JSON lines {"text": ...} or {"messages": [...]} and prints {"ids": [...]}
// for each, like llama.cpp's llama-tokenize: for scripts and for checking a tokenizer by hand.
func tokenizeCommand() *cli.Command {
	var dir string
	var addSpecialTokens bool
	return &cli.Command{
		Name:  "tokenize",
		Usage: `read JSON lines {"text": ...} or {"messages": [...]} on stdin, print {"ids": [...]} lines`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "tokenizer", Destination: &dir, Aliases: []string{"model-path"}, Usage: "directory with tokenizer.json and tokenizer_config.json, or a GGUF file", Sources: cli.EnvVars("MODEL_PATH"), Required: true},
			&cli.BoolFlag{Name: "add-special-tokens", Destination: &addSpecialTokens, Usage: "add BOS / post-processor tokens to text inputs"},
		},
		Action: func(_ context.Context, cmd *cli.Command) error {
			if err := runflags.NoArgs(cmd); err != nil {
				return err
			}
			return tokenizeLines(dir, addSpecialTokens, os.Stdin, os.Stdout)
		},
	}
}

type tokenizeLine struct {
	Text     *string          `json:"text"`
	Messages []map[string]any `json:"messages"`
	// AddGenerationPrompt applies to messages; true unless set.
	AddGenerationPrompt *bool          `json:"add_generation_prompt"`
	ChatTemplateKwargs  map[string]any `json:"chat_template_kwargs"`
}

func tokenizeLines(dir string, addSpecial bool, in io.Reader, out io.Writer) error {
	tok, err := tokenizer.Load(dir)
	if err != nil {
		return err
	}
	var tmpl *chat.Template
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 256<<20)
	w := bufio.NewWriter(out)
	defer w.Flush()
	enc := json.NewEncoder(w)
	for n := 1; sc.Scan(); n++ {
		if len(sc.Bytes()) == 0 {
			continue
		}
		var line tokenizeLine
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			return fmt.Errorf("line %d: %w", n, err)
		}
		var ids []int32
		switch {
		case line.Messages != nil:
			if tmpl == nil {
				if tok.ChatTemplate() == "" {
					return fmt.Errorf("line %d: %s has no chat template", n, dir)
				}
				if tmpl, err = chat.Compile(tok.ChatTemplate()); err != nil {
					return fmt.Errorf("chat template of %s: %w", dir, err)
				}
			}
			addGen := line.AddGenerationPrompt == nil || *line.AddGenerationPrompt
			prompt, err := tmpl.Apply(line.Messages, chat.Options{AddGenerationPrompt: addGen, Extra: line.ChatTemplateKwargs, Special: tok.SpecialTokenStrings()})
			if err != nil {
				return fmt.Errorf("line %d: %w", n, err)
			}
			ids = tok.Encode(prompt, false)
		case line.Text != nil:
			ids = tok.Encode(*line.Text, addSpecial)
		default:
			return fmt.Errorf("line %d: want {\"text\": ...} or {\"messages\": [...]}", n)
		}
		if ids == nil {
			ids = []int32{}
		}
		if err := enc.Encode(map[string][]int32{"ids": ids}); err != nil {
			return err
		}
	}
	return sc.Err()
}
