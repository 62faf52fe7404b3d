package main

// The CUDA backend registers itself as "cuda" (--device cuda:K). Built with the nocuda tag it
// still registers, and opening it fails saying the binary has no driver loader.
import _ "github.com/llmserve/llmserve/backend/cuda"
