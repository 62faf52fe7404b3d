// Package kubernetes holds the Kubernetes manifests of llmserve and, in its test, their strict
// decoding into the Kubernetes API types. It is a module of its own so that k8s.io/api and its
// dependencies stay out of the engine's go.mod: nothing but this test needs them.
package kubernetes
